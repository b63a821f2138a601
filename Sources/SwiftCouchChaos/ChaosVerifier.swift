import Foundation
import SwiftCouch

/// Reads the database back, without faults, and holds every completion against it.
struct ChaosVerifier {
    let client: CouchDBClient
    let database: String

    /// What the database holds for one chain document: the tokens of every revision on its
    /// history, whether its winning leaf is deleted, and how many leaves it has.
    struct History: Sendable {
        var tokens: Set<String> = []
        var revisions: Set<String> = []
        var deleted = false
        var leaves = 0
    }

    func verify(_ entries: [ChaosEntry], bulk: Result<[BulkWriteResult], any Error>, bulkCount: Int) async throws
        -> ChaosReport
    {
        var report = ChaosReport()
        report.operations = entries.count + bulkCount
        let all = try await client.value(
            AllDocsOperation<SoakDocument>(database: database, options: KeyRangeOptions(includeDocs: true)))
        var byKey: [String: [SoakDocument]] = [:]
        for row in all.rows { if let doc = row.doc { byKey[doc.chaosKey, default: []].append(doc) } }

        var histories: [String: History] = [:]
        for id in Set(entries.filter { $0.kind != .post }.map(\.key)) {
            histories[id] = try await history(of: id)
        }

        for entry in entries {
            report.completions += entry.completions
            if entry.completions > 1 { report.doubleCompletions += 1 }
            if entry.cancelRequested { report.cancelRequests += 1 }
            guard let outcome = entry.outcome else { continue }
            let applied: Bool
            var revisionFound = true
            switch entry.kind {
            case .post:
                let docs = byKey[entry.key] ?? []
                if docs.count > 1 { report.duplicates += 1 }
                applied = !docs.isEmpty
            case .create, .update:
                let history = histories[entry.key] ?? History()
                if history.leaves > 1 { report.duplicates += 1 }
                applied = entry.token.map { history.tokens.contains($0) } ?? false
                if case .success(let rev?, _) = outcome { revisionFound = history.revisions.contains(rev) }
            case .delete:
                applied = histories[entry.key]?.deleted ?? false
            case .read:
                if case .success(_, let token?) = outcome {
                    report.successes += 1
                    if histories[entry.key]?.tokens.contains(token) != true {
                        report.badReads += 1
                    } else {
                        report.confirmed += 1
                    }
                } else if case .unknown = outcome {
                    report.unknownOutcomes += 1
                } else {
                    report.failures += 1
                }
                continue
            }
            switch outcome {
            case .success:
                report.successes += 1
                if applied && revisionFound {
                    report.confirmed += 1
                } else {
                    report.unconfirmed += 1
                    report.unconfirmedExamples.append(
                        "\(entry.kind) \(entry.key): reported success, not in the database")
                }
            case .notApplied(let message):
                report.failures += 1
                report.failureKinds[ChaosReport.kind(of: message), default: 0] += 1
                if applied {
                    report.phantomWrites += 1
                    report.phantomExamples.append("\(entry.kind) \(entry.key): \(message)")
                }
            case .unknown:
                report.unknownOutcomes += 1
            }
        }

        // Bulk documents: each success in the database, no key written twice.
        switch bulk {
        case .success(let results):
            report.completions += results.count
            for result in results {
                switch result {
                case .success(let id, let rev):
                    report.successes += 1
                    if all.rows.contains(where: { $0.id == id && $0.value?.rev == rev }) {
                        report.confirmed += 1
                    } else {
                        report.unconfirmed += 1
                        report.unconfirmedExamples.append("bulk \(id): reported rev \(rev) not in the database")
                    }
                case .failure:
                    report.failures += 1
                }
            }
        case .failure(let error):
            report.bulkError = "\(error)"
        }
        for n in 0..<bulkCount where (byKey["bulk-\(n)"]?.count ?? 0) > 1 { report.duplicates += 1 }
        return report
    }

    /// The history of one document: every revision on every leaf's path, with its token.
    private func history(of id: String) async throws -> History {
        var history = History()
        let operation = GenericJSONOperation<[JSONValue]>(
            GenericOperation(
                path: CouchPath(database, id),
                query: [URLQueryItem(name: "open_revs", value: "all"), URLQueryItem(name: "revs", value: "true")]))
        let leaves: [JSONValue]
        switch await client.executeResult(operation) {
        case .success(let response): leaves = response.value
        case .failure(let error) where error.statusCode == 404: return history
        case .failure(let error): throw error
        }
        for leaf in leaves {
            guard let doc = leaf["ok"] else { continue }
            history.leaves += 1
            if doc["_deleted"]?.boolValue == true { history.deleted = true }
            guard let start = doc["_revisions"]?["start"]?.intValue, let ids = doc["_revisions"]?["ids"]?.arrayValue
            else { continue }
            for (offset, hash) in ids.enumerated() {
                guard let hash = hash.stringValue else { continue }
                let rev = "\(Int(start) - offset)-\(hash)"
                history.revisions.insert(rev)
                let body = try await client.value(
                    GetDocumentOperation<JSONValue>(database: database, id: id, revision: rev))
                if let token = body["token"]?.stringValue { history.tokens.insert(token) }
            }
        }
        return history
    }
}

/// The soak's counts and the invariants they must meet.
struct ChaosReport: Sendable {
    var operations = 0
    var completions = 0
    var doubleCompletions = 0
    var stalls = 0
    var successes = 0
    var confirmed = 0
    var unconfirmed = 0
    var failures = 0
    var unknownOutcomes = 0
    var phantomWrites = 0
    var duplicates = 0
    var badReads = 0
    var cancelRequests = 0
    var requests = 0
    /// One request per single-document operation and one per bulk batch: what a fault-free run sends.
    var baselineRequests = 0
    var logins = 0
    var faultsFired = 0
    var elapsed: TimeInterval = 0
    var bulkError: String?
    var faultLines: [String] = []
    var stalledExamples: [String] = []
    var unconfirmedExamples: [String] = []
    var phantomExamples: [String] = []
    /// Failures that were not done, by the start of their message.
    var failureKinds: [String: Int] = [:]

    /// A failure message without what varies from one operation to the next (paths, ids).
    static func kind(of message: String) -> String {
        let withoutPath = message.split(separator: "(").first.map(String.init) ?? message
        return String(withoutPath.prefix(90)).trimmingCharacters(in: .whitespaces)
    }

    /// Each broken invariant, in words; empty when all hold.
    var broken: [String] {
        var lines: [String] = []
        if stalls > 0 { lines.append("\(stalls) operations never completed: \(stalledExamples)") }
        if doubleCompletions > 0 { lines.append("\(doubleCompletions) operations completed more than once") }
        if completions != operations, stalls == 0, bulkError == nil {
            lines.append("\(completions) completions for \(operations) operations")
        }
        if unconfirmed > 0 {
            lines.append("\(unconfirmed) successes not in the database: \(unconfirmedExamples.prefix(5))")
        }
        if phantomWrites > 0 {
            lines.append(
                "\(phantomWrites) writes reported as not done are in the database: \(phantomExamples.prefix(5))")
        }
        if duplicates > 0 { lines.append("\(duplicates) documents written more than once") }
        if badReads > 0 { lines.append("\(badReads) reads returned a body no write produced") }
        if let bulkError { lines.append("the BulkWriter failed as a whole: \(bulkError)") }
        return lines
    }

    func table() -> String {
        let rows: [(String, String)] = [
            ("operations", "\(operations)"),
            ("completions", "\(completions)"),
            ("completed twice", "\(doubleCompletions)"),
            ("stalls", "\(stalls)"),
            ("successes", "\(successes)"),
            ("successes confirmed in the database", "\(confirmed)"),
            ("successes not in the database", "\(unconfirmed)"),
            ("failures (not done)", "\(failures)"),
            ("failures (outcome unknown)", "\(unknownOutcomes)"),
            ("failures that were done (phantom writes)", "\(phantomWrites)"),
            ("duplicates", "\(duplicates)"),
            ("reads of a body no write produced", "\(badReads)"),
            ("cancellations requested", "\(cancelRequests)"),
            ("requests the server saw", "\(requests)"),
            (
                "resends and retries (requests beyond one per operation or bulk batch)",
                "\(max(0, requests - baselineRequests))"
            ),
            ("logins (POST /_session)", "\(logins)"),
            ("faults injected", "\(faultsFired)"),
            ("seconds", String(format: "%.1f", elapsed)),
        ]
        let width = rows.map(\.0.count).max() ?? 0
        var text = "Faults, all at once:\n" + faultLines.map { "  \($0)" }.joined(separator: "\n") + "\n"
        text += "Failures that were not done, by kind:\n"
        for (kind, count) in failureKinds.sorted(by: { $0.value > $1.value }) { text += "  \(count) × \(kind)\n" }
        text += "| \("invariant".padding(toLength: width, withPad: " ", startingAt: 0)) | value |\n"
        text += "|\(String(repeating: "-", count: width + 2))|-------|\n"
        for (name, value) in rows {
            text += "| \(name.padding(toLength: width, withPad: " ", startingAt: 0)) | \(value) |\n"
        }
        return text
    }
}

extension CouchDBClient {
    /// `execute`, with the error as a value.
    func executeResult<Op: CouchOperation>(_ operation: Op) async -> Result<CouchResponse<Op.Response>, CouchError> {
        do {
            return .success(try await execute(operation))
        } catch {
            return .failure(error)
        }
    }
}
