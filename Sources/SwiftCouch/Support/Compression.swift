import CouchGzip

/// Gzip, zlib and raw DEFLATE compression in pure Swift (from SwiftCouch's internal `CouchGzip`
/// module, which the TestServer shares).
public typealias Gzip = CouchGzip.Gzip
/// Decompresses a gzip, zlib or raw DEFLATE stream chunk by chunk, in constant memory.
public typealias GzipInflater = CouchGzip.GzipInflater
/// Why a compressed stream could not be decompressed.
public typealias GzipError = CouchGzip.GzipError
