// JsonStream: the elements of named arrays reach their sink one at a time and
// never the tree, and whatever else the text holds is bounded (depth, values
// kept, values per element), so hostile text cannot grow the parser.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_stream.h"

using namespace oomsnap;
using json = nlohmann::json;

namespace {

// A stream of one path, collecting what it was handed.
struct Collected {
  JsonStream stream;
  std::vector<json> elements;
  explicit Collected(std::vector<std::string> path, JsonStream::Limits limits = {}) : stream(limits) {
    stream.stream_elements(std::move(path), [this](json& e, std::string&) {
      elements.push_back(std::move(e));
      return true;
    });
  }
};

}  // namespace

TEST(JsonStream, ElementsOfANamedArrayGoToTheSinkInOrderAndNotToTheTree) {
  Collected c({"record", "entries"});
  std::string why;
  auto tree = c.stream.parse(R"({"kind":"r","record":{"entries":[{"a":1},"two",[3],null],"other":[1,2]}})", why);
  ASSERT_TRUE(tree) << why;
  ASSERT_EQ(c.elements.size(), 4u);
  EXPECT_EQ(c.elements[0], json({{"a", 1}}));
  EXPECT_EQ(c.elements[1], "two");
  EXPECT_EQ(c.elements[2], json::array({3}));
  EXPECT_TRUE(c.elements[3].is_null());
  EXPECT_EQ((*tree)["record"]["entries"], json::array());
  EXPECT_EQ((*tree)["record"]["other"], json::array({1, 2}));
  EXPECT_EQ((*tree)["kind"], "r");
}

TEST(JsonStream, OnlyThePathThroughObjectsIsStreamed) {
  Collected c({"record", "entries"});
  std::string why;
  // The same keys under an array, inside an element, or at another depth stay in the tree.
  auto tree = c.stream.parse(
      R"({"list":[{"record":{"entries":[1]}}],"entries":[2],"record":{"x":{"entries":[3]},"entries":[{"entries":[4]}]}})",
      why);
  ASSERT_TRUE(tree) << why;
  ASSERT_EQ(c.elements.size(), 1u);
  EXPECT_EQ(c.elements[0], json({{"entries", json::array({4})}}));
  EXPECT_EQ((*tree)["list"][0]["record"]["entries"], json::array({1}));
  EXPECT_EQ((*tree)["entries"], json::array({2}));
  EXPECT_EQ((*tree)["record"]["x"]["entries"], json::array({3}));
}

TEST(JsonStream, ANamedPathHoldingNoArrayIsLeftForTheCallersChecks) {
  Collected c({"entries"});
  std::string why;
  auto tree = c.stream.parse(R"({"entries":{"a":[1]}})", why);
  ASSERT_TRUE(tree) << why;
  EXPECT_TRUE(c.elements.empty());
  EXPECT_EQ((*tree)["entries"]["a"], json::array({1}));
}

TEST(JsonStream, ANamedArrayTwiceOrAnyDuplicateKeyIsRefused) {
  std::string why;
  Collected twice({"entries"});
  EXPECT_FALSE(twice.stream.parse(R"({"entries":[1],"entries":[2]})", why));
  EXPECT_NE(why.find("appears twice"), std::string::npos) << why;
  Collected dup({"entries"});
  why.clear();
  EXPECT_FALSE(dup.stream.parse(R"({"a":1,"a":2})", why));
  EXPECT_NE(why.find("duplicate key 'a'"), std::string::npos) << why;
  // Parsing again starts afresh.
  why.clear();
  EXPECT_TRUE(twice.stream.parse(R"({"entries":[1]})", why)) << why;
}

TEST(JsonStream, TheSinkCanStopTheParse) {
  JsonStream stream({});
  int calls = 0;
  stream.stream_elements({"entries"}, [&](json&, std::string& why) {
    why = "element " + std::to_string(calls) + " refused";
    return ++calls < 2;
  });
  std::string why;
  EXPECT_FALSE(stream.parse(R"({"entries":[1,2,3,4]})", why));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(why, "element 1 refused");
}

TEST(JsonStream, DepthAndValueCountsAreBounded) {
  std::string why;
  JsonStream::Limits limits;
  limits.max_depth = 4;
  limits.max_tree_values = 10;
  limits.max_element_values = 3;
  Collected c({"entries"}, limits);
  EXPECT_TRUE(c.stream.parse(R"({"a":{"b":{"c":[1]}}})", why)) << why;
  EXPECT_FALSE(c.stream.parse(R"({"a":{"b":{"c":[[1]]}}})", why));
  EXPECT_NE(why.find("nested deeper than 4"), std::string::npos) << why;
  // Ten values kept (the root counts), the eleventh refused; streamed elements are not counted.
  why.clear();
  EXPECT_TRUE(c.stream.parse(R"({"entries":[1,2,3,4,5,6,7,8,9,10,11,12],"t":[1,2,3,4,5,6,7]})", why)) << why;
  EXPECT_FALSE(c.stream.parse(R"({"t":[1,2,3,4,5,6,7,8,9,10]})", why));
  EXPECT_NE(why.find("more than 10 values outside the lists"), std::string::npos) << why;
  // An element of three values passes, one of four does not.
  why.clear();
  EXPECT_TRUE(c.stream.parse(R"({"entries":[[1,2],{"a":1,"b":2}]})", why)) << why;
  EXPECT_FALSE(c.stream.parse(R"({"entries":[[1,2,3]]})", why));
  EXPECT_NE(why.find("an element of entries holds more than 3 values"), std::string::npos) << why;
}

TEST(JsonStream, TextThatIsNotJsonSaysWhere) {
  JsonStream stream({});
  std::string why;
  EXPECT_FALSE(stream.parse("{\"a\":1,", why));
  EXPECT_EQ(why.rfind("not JSON (at byte ", 0), 0u) << why;
  EXPECT_FALSE(stream.parse("{\"a\":1} x", why));
  EXPECT_FALSE(stream.parse("", why));
  EXPECT_FALSE(stream.parse("\"\xff\"", why));  // not UTF-8
  auto scalar = stream.parse("7", why);
  ASSERT_TRUE(scalar) << why;
  EXPECT_EQ(*scalar, 7);
}
