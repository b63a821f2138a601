import Foundation
import SwiftCouch

/// A checkpoint document (`_local/<replication id>`), in CouchDB's format, kept on both sides.
struct ReplicationLog: Sendable, Equatable {
    /// One session's entry of the history, newest first.
    struct Entry: Sendable, Equatable {
        var sessionID: String
        var startTime: String
        var endTime: String
        var startLastSeq: JSONValue
        var endLastSeq: JSONValue
        var recordedSeq: JSONValue
        var summary: ReplicationSummary

        var json: JSONValue {
            .object([
                "session_id": .string(sessionID),
                "start_time": .string(startTime),
                "end_time": .string(endTime),
                "start_last_seq": startLastSeq,
                "end_last_seq": endLastSeq,
                "recorded_seq": recordedSeq,
                "missing_checked": .int(Int64(summary.missingChecked)),
                "missing_found": .int(Int64(summary.missingFound)),
                "docs_read": .int(Int64(summary.docsRead)),
                "docs_written": .int(Int64(summary.docsWritten)),
                "doc_write_failures": .int(Int64(summary.docWriteFailures)),
            ])
        }

        init(
            sessionID: String, startTime: String, endTime: String, startLastSeq: JSONValue, endLastSeq: JSONValue,
            recordedSeq: JSONValue, summary: ReplicationSummary
        ) {
            self.sessionID = sessionID
            self.startTime = startTime
            self.endTime = endTime
            self.startLastSeq = startLastSeq
            self.endLastSeq = endLastSeq
            self.recordedSeq = recordedSeq
            self.summary = summary
        }

        init?(json: JSONValue) {
            guard let session = json["session_id"]?.stringValue else { return nil }
            sessionID = session
            startTime = json["start_time"]?.stringValue ?? ""
            endTime = json["end_time"]?.stringValue ?? ""
            startLastSeq = json["start_last_seq"] ?? .null
            endLastSeq = json["end_last_seq"] ?? .null
            recordedSeq = json["recorded_seq"] ?? json["end_last_seq"] ?? .null
            var summary = ReplicationSummary()
            func count(_ key: String) -> Int {
                guard let value = json[key]?.intValue, value >= 0, value < Int64(Int32.max) else { return 0 }
                return Int(value)
            }
            summary.missingChecked = count("missing_checked")
            summary.missingFound = count("missing_found")
            summary.docsRead = count("docs_read")
            summary.docsWritten = count("docs_written")
            summary.docWriteFailures = count("doc_write_failures")
            self.summary = summary
        }
    }

    /// The most entries a history keeps (CouchDB's limit).
    static let historyLimit = 50

    var rev: String?
    var sessionID: String
    var sourceLastSeq: JSONValue
    var history: [Entry]

    func json(id: String) -> JSONValue {
        var members: [String: JSONValue] = [
            "_id": .string("_local/" + id),
            "session_id": .string(sessionID),
            "source_last_seq": sourceLastSeq,
            "replication_id_version": .int(Int64(ReplicationID.version)),
            "history": .array(history.map(\.json)),
        ]
        if let rev { members["_rev"] = .string(rev) }
        return .object(members)
    }

    init(rev: String?, sessionID: String, sourceLastSeq: JSONValue, history: [Entry]) {
        self.rev = rev
        self.sessionID = sessionID
        self.sourceLastSeq = sourceLastSeq
        self.history = history
    }

    init?(json: JSONValue) {
        guard let session = json["session_id"]?.stringValue, let last = json["source_last_seq"] else { return nil }
        rev = json["_rev"]?.stringValue
        sessionID = session
        sourceLastSeq = last
        history = (json["history"]?.arrayValue ?? []).compactMap(Entry.init(json:))
    }

    /// Whether `other` holds what this log holds (the revision aside): a checkpoint PUT answered
    /// 409 after a lost answer counts as written when the stored document is the one sent.
    func sameContent(as other: ReplicationLog) -> Bool {
        sessionID == other.sessionID && sourceLastSeq == other.sourceLastSeq && history == other.history
    }

    /// Where a replication resumes, from the source's and the target's logs: the same session's
    /// `source_last_seq`, else the recorded sequence of the newest history entry both share, else
    /// nil (from the start). Sequences are never compared, only carried.
    static func startPoint(source: ReplicationLog?, target: ReplicationLog?) -> JSONValue? {
        guard let source, let target else { return nil }
        if source.sessionID == target.sessionID { return source.sourceLastSeq }
        let targetSessions = Set(target.history.map(\.sessionID))
        for entry in source.history where targetSessions.contains(entry.sessionID) {
            return entry.recordedSeq
        }
        return nil
    }

    /// The source's history to continue from: the entries of the source log, when there is a
    /// common starting point (so histories stay shared), else none.
    static func baseHistory(source: ReplicationLog?, target: ReplicationLog?) -> [Entry] {
        guard startPoint(source: source, target: target) != nil, let source else { return [] }
        return source.history
    }
}

/// CouchDB's time format in checkpoint histories (RFC 1123).
enum HTTPDate {
    static func now() -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date())
    }
}
