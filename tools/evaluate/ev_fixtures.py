"""The leaking fixture of each runtime the evaluation measures (issue #25 item 5).

go            the Go heapfixture (leaks at main.leakForever), --fixture
java-g1       the project's HeapFixture on the host JDK 17 with G1 (leaks HeapFixture$Leak
java-serial   holding byte[] payloads), with Serial, or with Parallel; -Xmx twice the
java-parallel limit, so the kernel ends it, not the JVM's own OutOfMemoryError
python        tests/fixtures/python/heapfixture.py on the host CPython 3.11 (leaks
              __main__.Leak holding bytes payloads)

Each prints one JSON line when ready (Go: {"ready": true, ...}; the others their
histogram) and then leaks at the rate asked for."""
import os

RUNTIMES = ("go", "java-g1", "java-serial", "java-parallel", "python")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
PYTHON = "/usr/bin/python3.11"
JAVA_GC = {"java-g1": "-XX:+UseG1GC", "java-serial": "-XX:+UseSerialGC", "java-parallel": "-XX:+UseParallelGC"}


def java_classpath(opts):
    return os.path.join(opts.fixtures_dir, "java")


def argv(runtime, opts, cell):
    rate = f"{cell['rate_mb_s']:g}"
    if runtime == "go":
        return [opts.fixture, "-leak-mb-per-s", rate]
    if runtime in JAVA_GC:
        return [JAVA, JAVA_GC[runtime], "-Xms64m", f"-Xmx{2 * cell['limit_mb']}m", "-cp", java_classpath(opts),
                "HeapFixture", "--markers", "1000", "--nodes", "1000", "--int-arrays", "0", "--long-arrays", "0",
                "--object-arrays", "0", "--humongous", "0", "--strings", "0", "--leak-mb-per-s", rate]
    if runtime == "python":
        return [PYTHON, os.path.join(ROOT, "tests", "fixtures", "python", "heapfixture.py"), "--with-dict", "0",
                "--with-slots", "0", "--inner", "0", "--dicts", "0", "--lists", "0", "--blobs", "0",
                "--dict-blobs", "0", "--attr-blobs", "0", "--leak-mb-per-s", rate]
    raise ValueError(runtime)


def is_ready(runtime, line):
    """The fixture's first line, parsed: Go says ready; the others print a JSON object."""
    return bool(line.get("ready")) if runtime == "go" else isinstance(line, dict)


def executables(runtime, opts):
    """Files the runtime's fixture needs (checked before the runs)."""
    if runtime == "go":
        return [opts.fixture]
    if runtime in JAVA_GC:
        return [JAVA]
    return [PYTHON]


# The leaked type on top of a complete snapshot of each runtime's fixture.
TOP_ENTRY = {"go": "main.leakForever", "java-g1": "byte[]", "java-serial": "byte[]", "java-parallel": "byte[]",
             "python": "bytes"}
