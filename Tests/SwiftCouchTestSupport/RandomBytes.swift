import Foundation

/// `count` random bytes, made eight at a time.
///
/// `(0..<n).map { _ in UInt8.random(in: 0...255) }` makes one closure call and one generator call a
/// byte: for the mebibytes an attachment test needs, seconds of a debug build's time, and a minute
/// under ThreadSanitizer, all of it on a thread of Swift's cooperative pool when the test is async.
public func randomBytes(_ count: Int) -> Data {
    var generator = SystemRandomNumberGenerator()
    var data = Data(count: max(0, count))
    data.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            var word = generator.next()
            let length = min(8, buffer.count - offset)
            withUnsafeBytes(of: &word) { bytes in
                buffer.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: length)
            }
            offset += length
        }
    }
    return data
}
