// libFuzzer target: the client's parsing of a server's answer (HTTPWire's response decoder, chunked framing,
// CouchGzip's inflation, the row parser and NDJSON splitter, the row and body decoders). Built by .ci/fuzz.
import SwiftCouch

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPResponse(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzEntryPoints.httpResponse(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
