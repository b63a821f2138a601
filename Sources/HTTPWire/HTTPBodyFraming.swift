/// How the body of a message is delimited on the wire (RFC 9112 §6).
public enum HTTPBodyFraming: Sendable, Equatable {
    /// No body at all.
    case none
    /// Exactly this many bytes follow the head.
    case contentLength(Int)
    /// `Transfer-Encoding: chunked`.
    case chunked
    /// The body runs until the connection closes (responses only).
    case untilClose

    /// The framing of a request's body. A request without `Content-Length` or `Transfer-Encoding`
    /// has no body. Both together, a coding other than `chunked`, or a bad length throw.
    public static func ofRequest(_ head: HTTPRequestHead) throws -> HTTPBodyFraming {
        let codings = transferCodings(head.headers)
        if !codings.isEmpty {
            guard !head.headers.contains("Content-Length") else { throw HTTPWireError.conflictingFraming }
            guard codings == ["chunked"] else {
                throw HTTPWireError.unsupportedTransferEncoding(
                    head.headers.values("Transfer-Encoding").joined(separator: ", "))
            }
            return .chunked
        }
        if let length = try contentLength(head.headers) { return .contentLength(length) }
        return .none
    }

    /// The framing of a response's body, given the method of the request it answers: none for
    /// `HEAD`, 1xx, 204 and 304; chunked when `chunked` is the final transfer coding; else
    /// `Content-Length`; else until the connection closes.
    public static func ofResponse(_ head: HTTPResponseHead, requestMethod: String) throws -> HTTPBodyFraming {
        if requestMethod == "HEAD" || head.isInformational || head.status == 204 || head.status == 304 { return .none }
        if requestMethod == "CONNECT", (200..<300).contains(head.status) { return .none }
        if let length = plainContentLength(head.headers) { return .contentLength(length) }
        let codings = transferCodings(head.headers)
        if !codings.isEmpty {
            return codings.last == "chunked" && codings.filter({ $0 == "chunked" }).count == 1 ? .chunked : .untilClose
        }
        if let length = try contentLength(head.headers) { return .contentLength(length) }
        return .untilClose
    }

    /// The usual case in one pass over the fields, without the lists the general rules build: no
    /// `Transfer-Encoding` and one `Content-Length` of digits only. Nil for anything else.
    static func plainContentLength(_ headers: HTTPHeaders) -> Int? {
        var found: Substring.UTF8View?
        for pair in headers.pairs {
            if pair.name.caseInsensitiveEquals("Transfer-Encoding") { return nil }
            if pair.name.caseInsensitiveEquals("Content-Length") {
                guard found == nil else { return nil }
                found = Substring(pair.value).utf8
            }
        }
        guard let digits = found, !digits.isEmpty, digits.count <= 18 else { return nil }
        var value = 0
        for byte in digits {
            guard byte >= 0x30 && byte <= 0x39 else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        return value
    }

    /// The transfer codings of every `Transfer-Encoding` field, lower-cased, in order
    /// (parameters dropped).
    static func transferCodings(_ headers: HTTPHeaders) -> [String] {
        headers.values("Transfer-Encoding").flatMap { $0.split(separator: ",") }.map {
            let coding = $0.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
            return coding.trimmingHTTPWhitespace().lowercased()
        }.filter { !$0.isEmpty }
    }

    /// The value of `Content-Length` (all copies and list members must agree), or nil when absent.
    public static func contentLength(_ headers: HTTPHeaders) throws -> Int? {
        let values = headers.values("Content-Length")
        guard !values.isEmpty else { return nil }
        var result: Int?
        for value in values {
            for member in value.split(separator: ",", omittingEmptySubsequences: false) {
                let text = member.trimmingHTTPWhitespace()
                guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                    let n = Int(text)
                else { throw HTTPWireError.invalidContentLength(value) }
                if let r = result, r != n { throw HTTPWireError.invalidContentLength(values.joined(separator: ", ")) }
                result = n
            }
        }
        return result
    }
}
