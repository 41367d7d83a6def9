#!/usr/bin/env python3
"""Writes the configuration's two reference pages from deploy/oomsnap.toml, the
example that sets every key the agent accepts to its default and says what it
does (DeployConfig.* hold it to the parser):
  docs/config.md         its introduction, then the example verbatim;
  docs/man/oomsnap.toml.5  the same keys as a man page, section by section.
--check: write nothing, exit 1 when either page differs from what it would be
(DeployConfig.DocsPagesAreTheExample runs it)."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "deploy", "oomsnap.toml")
MD = os.path.join(ROOT, "docs", "config.md")
MAN = os.path.join(ROOT, "docs", "man", "oomsnap.toml.5")


def markdown(example):
    with open(MD) as f:
        intro = f.read().split("```toml\n")[0]
    return intro + "```toml\n" + example + "```\n"


def roff_text(line):
    line = line.replace("\\", "\\e")
    return ("\\&" + line) if line[:1] in (".", "'") else line


def man(example):
    out = [
        '.TH OOMSNAP.TOML 5 2026-12-04 "oomsnap 0.1.0" "File Formats"',
        ".SH NAME",
        "oomsnap.toml \\- configuration of the oomsnap agent",
        ".SH SYNOPSIS",
        ".I /etc/oomsnap/oomsnap.toml",
        "(\\fBoomsnap watch \\-\\-config\\fR \\fIFILE\\fR)",
        ".SH DESCRIPTION",
        "One TOML file; without it every key has its default. Parsing is strict: an",
        "unknown key, a wrong type or an out-of-range value stops the agent at start,",
        "or on SIGHUP keeps the running configuration, with an error naming the key",
        "and its line. Durations are seconds, integer or fractional.",
        "The file must be owned by root or the agent's user and writable by neither",
        "its group nor others; any other is refused, naming its path, mode and owner.",
        "Below, every key with its default.",
    ]
    pending = []  # comment lines waiting for their key or section
    header_done = False
    for raw in example.splitlines():
        line = raw.rstrip()
        if not header_done:
            # The file's own header (up to the first blank line) describes
            # the file, not a key: DESCRIPTION says it.
            if line == "":
                header_done = True
            continue
        if line.startswith("#"):
            # "# text" -> "text"; "#   indented" keeps its indent (roff breaks there).
            pending.append(line[2:] if line.startswith("# ") else line[1:])
            continue
        if line == "":
            continue
        m = re.match(r"^\[([A-Za-z_]+)\]$", line)
        if m:
            out += [".SH [%s]" % m.group(1)]
            if pending:
                out += [".PP"] + [roff_text(p) for p in pending]
            pending = []
            continue
        m = re.match(r"^([A-Za-z_]+) = (.*)$", line)
        if not m:
            raise SystemExit("gen-config-doc: cannot read line: " + line)
        if len(out) and not any(o.startswith(".SH KEYS") or o.startswith(".SH [") for o in out):
            out += [".SH KEYS"]
        out += [".TP", "\\fB%s\\fR = %s" % (m.group(1), roff_text(m.group(2)))]
        out += [roff_text(p) for p in pending]
        pending = []
    out += [
        ".SH FILES",
        ".TP",
        ".I /etc/oomsnap/oomsnap.toml",
        "Where the systemd unit and the DaemonSet's ConfigMap put it.",
        ".SH SEE ALSO",
        ".BR oomsnap (1);",
        "the source tree's",
        ".I deploy/oomsnap.toml",
        "(this page's source) and",
        ".IR docs/config.md .",
    ]
    return "\n".join(out) + "\n"


def main():
    with open(EXAMPLE) as f:
        example = f.read()
    pages = {MD: markdown(example), MAN: man(example)}
    if sys.argv[1:] == ["--check"]:
        stale = []
        for path, text in pages.items():
            with open(path) as f:
                if f.read() != text:
                    stale.append(os.path.relpath(path, ROOT))
        if stale:
            print("gen-config-doc: out of date (run tools/gen-config-doc.py): " + ", ".join(stale))
            return 1
        return 0
    for path, text in pages.items():
        with open(path, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
