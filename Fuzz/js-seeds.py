#!/usr/bin/env python3
"""Writes Fuzz/corpus/js/ from the design functions and snippets in Tests/ (CouchJS's own tests and the
TestServer's): each function source as it is, and each interpreter snippet wrapped in `function(doc) { ... }`.
Not run by CI: the files are committed; run it again only to regenerate them."""
import glob, hashlib, os, re

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
out = os.path.join(here, "corpus", "js")
os.makedirs(out, exist_ok=True)
literal = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
sources = set()


def unescape(raw):
    """A Swift string literal's text (backslash escapes of quotes, n, t, 0, u{...}); None for others."""
    result, i = "", 0
    while i < len(raw):
        c = raw[i]
        if c != "\\":
            result += c
            i += 1
            continue
        nxt = raw[i + 1] if i + 1 < len(raw) else ""
        if nxt in "\\\"'":
            result += nxt
            i += 2
        elif nxt in "nt0":
            result += {"n": "\n", "t": "\t", "0": "\0"}[nxt]
            i += 2
        elif nxt == "u" and raw[i + 2:i + 3] == "{":
            end = raw.index("}", i)
            result += chr(int(raw[i + 3:end], 16))
            i = end + 1
        else:
            return None
    return result


for path in glob.glob(os.path.join(root, "Tests", "**", "*.swift"), recursive=True):
    text = open(path, encoding="utf-8").read()
    for match in literal.finditer(text):
        raw = match.group(1)
        if "\\(" in raw:
            continue  # Swift interpolation
        value = unescape(raw)
        if value is not None and re.match(r"\s*function\s*\(", value):
            sources.add(value)
    if path.endswith("InterpreterTests.swift"):
        for match in re.finditer(r'run\(\s*"((?:[^"\\\n]|\\.)*)"', text):
            value = unescape(match.group(1))
            if value is not None:
                sources.add("function(doc) {\n" + value + "\n}")
for source in sorted(sources):
    name = hashlib.sha1(source.encode()).hexdigest()[:12]
    with open(os.path.join(out, name + ".js"), "w", encoding="utf-8") as f:
        f.write(source)
print("wrote %d seeds to %s" % (len(sources), out))
