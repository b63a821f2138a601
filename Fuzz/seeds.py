#!/usr/bin/env python3
"""Writes Fuzz/corpus/http/ from ../shared/couchdb-transcripts (real CouchDB 3.5.0 answers): two answers per
scenario as they came over the wire (chunked where CouchDB chunked them), plus a gzip body, a continuous
_changes feed, interim 100/102 answers and two pipelined answers. Each file is one control byte (see
FuzzEntryPoints.httpResponse: how the input is cut into reads, HEAD or GET, the row shape) and the bytes.
Not run by CI: the files are committed; run it again only to regenerate them."""
import base64, glob, gzip, json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
transcripts = os.path.join(here, "..", "..", "shared", "couchdb-transcripts")
if len(sys.argv) > 1:
    transcripts = sys.argv[1]
out = os.path.join(here, "corpus", "http")
os.makedirs(out, exist_ok=True)



def shape_of(response):
    """The row shape for a body (bits 5-7 of the control byte): 0 rows, 1 results, 2 docs, 3 array, 4 lines."""
    body = response.get("body")
    if response.get("body_encoding") != "json":
        return 4
    if isinstance(body, list):
        return 3
    if isinstance(body, dict):
        for shape, key in ((1, "results"), (2, "docs")):
            if key in body:
                return shape
    return 0



def body_bytes(response):
    encoding = response.get("body_encoding")
    body = response.get("body")
    if encoding == "json":
        return (json.dumps(body, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    if encoding == "base64":
        return base64.b64decode(body)
    if encoding == "ndjson":
        return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in body).encode()
    return b""


def wire(response, body, chunked=False, gzipped=False):
    head = "HTTP/1.1 %d %s\r\n" % (response["status"], response.get("reason", "OK"))
    for name, value in response["headers"].items():
        if name.lower() in ("content-length", "transfer-encoding", "content-encoding"):
            continue
        head += "%s: %s\r\n" % (name, value)
    if gzipped:
        body = gzip.compress(body, mtime=0)
        head += "Content-Encoding: gzip\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n\r\n"
        data = b""
        for start in range(0, len(body), 97):
            piece = body[start:start + 97]
            data += b"%x\r\n" % len(piece) + piece + b"\r\n"
        return head.encode() + data + b"0\r\n\r\n"
    head += "Content-Length: %d\r\n\r\n" % len(body)
    return head.encode() + body


def write(name, control, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([control]) + data)


count = 0
for path in sorted(glob.glob(os.path.join(transcripts, "*.json"))):
    scenario = json.load(open(path))
    if "steps" not in scenario:
        continue
    name = scenario["scenario"]
    steps = scenario["steps"]
    # The largest answer and an error answer, where there is one.
    picked = sorted(steps, key=lambda s: -len(body_bytes(s["response"])))[:1]
    picked += [s for s in steps if s["response"]["status"] >= 400][:1]
    for index, step in enumerate(picked):
        response = step["response"]
        chunked = response["headers"].get("Transfer-Encoding") == "chunked"
        control = (shape_of(response) << 5) | (0 if index == 0 else 7)
        write("%s-%d" % (name, index), control, wire(response, body_bytes(response), chunked=chunked))
        count += 1
    if name == "all_docs":
        response = picked[0]["response"]
        write("all_docs-gzip", 0x00, wire(response, body_bytes(response), gzipped=True))
        write("all_docs-gzip-chunked", 0x03, wire(response, body_bytes(response), chunked=True, gzipped=True))
        interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
        write("all_docs-interim", 0x05, interim + wire(response, body_bytes(response)))
        count += 3
    if name == "changes":
        lines = [s for s in steps if s["response"].get("body_encoding") == "ndjson"]
        for step in lines[:1]:
            response = step["response"]
            write("changes-continuous", 0x80, wire(response, body_bytes(response), chunked=True))
            count += 1
    if name == "server":
        first, second = steps[0]["response"], steps[1]["response"]
        write("server-pipelined", 0x02, wire(first, body_bytes(first)) + wire(second, body_bytes(second)))
        count += 1
print("wrote %d seeds to %s" % (count, out))
