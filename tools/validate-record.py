#!/usr/bin/env python3
"""Validates JSON documents against docs/record.schema.json (Debian's
python3-jsonschema): tools/validate-record.py [--snapshot] FILE...
Each FILE holds one JSON document per line (a record store, a golden file,
`oomsnap snapshot` output); --snapshot validates them as `oomsnap snapshot`
output ($defs/snapshot_command) instead of as records. Prints each invalid
document's file, line and every error with its path; exits 1 if any."""
import json
import os
import sys

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    snapshot = "--snapshot" in argv
    files = [a for a in argv if a != "--snapshot"]
    with open(os.path.join(ROOT, "docs", "record.schema.json")) as f:
        schema = json.load(f)
    if snapshot:
        schema = dict(schema, **{"$ref": "#/$defs/snapshot_command"})
        for k in ("required", "properties", "additionalProperties", "type"):
            schema.pop(k, None)
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except ValueError as e:
                    print("%s:%d: not JSON: %s" % (path, n, e))
                    bad += 1
                    continue
                errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
                for e in errors:
                    where = "/".join(str(p) for p in e.absolute_path) or "(top)"
                    print("%s:%d: %s: %s" % (path, n, where, e.message[:300]))
                bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
