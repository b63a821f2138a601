import Foundation

/// Writes requests and responses readably to the configured log handler, secrets redacted.
struct TranscriptLogger: Sendable {
    let handler: @Sendable (LogEvent) -> Void
    let bodyLimit: Int

    func log(request: HTTPRequest) {
        var text = "--> \(request.method) \(Redaction.redact(request.url.absoluteString))"
        text += headerLines(request.headers)
        text += bodyText(request.body)
        handler(LogEvent(level: .debug, message: text))
    }

    func log(response: HTTPResponse, for request: HTTPRequest, elapsed: TimeInterval) {
        var text = "<-- \(response.statusCode) \(request.method) \(request.path)"
        text += String(format: " (%.1f ms)", elapsed * 1000)
        text += headerLines(response.headers)
        text += bodyText(response.body)
        handler(LogEvent(level: .debug, message: text))
    }

    func log(error: any Error, for request: HTTPRequest) {
        handler(
            LogEvent(
                level: .warning,
                message: "<-- failed \(request.method) \(request.path): \(Redaction.redact(String(describing: error)))")
        )
    }

    private func headerLines(_ headers: HTTPFields) -> String {
        headers.map { "\n    \($0.name): \(Redaction.headerValue(name: $0.name, value: $0.value))" }.joined()
    }

    private func bodyText(_ body: Data?) -> String {
        guard let body, !body.isEmpty else { return "" }
        let shown = body.prefix(bodyLimit)
        let text = String(decoding: shown, as: UTF8.self)
        let suffix = body.count > bodyLimit ? "… (\(body.count) bytes)" : ""
        return "\n    " + Redaction.redact(text) + suffix
    }
}
