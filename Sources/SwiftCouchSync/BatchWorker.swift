import Foundation
import SwiftCouch

/// Copies one batch of changes: `_revs_diff` on the target, the missing revisions fetched from the
/// source (`_bulk_get` for documents without attachments, `open_revs` with `atts_since` for the
/// others and for design documents), written with `new_edits=false`. Shared by a session's
/// concurrent batches.
struct BatchWorker: Sendable {
    let source: SyncEndpoint
    let target: SyncEndpoint
    let options: ReplicationOptions
    let direction: ReplicationDirection
    let hub: EventHub
    /// False once the source answered `_bulk_get` with "not supported": `open_revs` from then on.
    let bulkGetSupported = LockedBox(true)

    init(replicator: Replicator) {
        source = replicator.source
        target = replicator.target
        options = replicator.options
        direction = replicator.direction
        hub = replicator.hub
    }

    /// One revision to fetch: the document, the revision, the target's possible ancestors.
    struct Wanted: Sendable {
        var id: String
        var revs: [String]
        var ancestors: [String]?
    }

    /// Copies the batch's revisions the target lacks; returns its counts.
    func copy(_ rows: [Change<JSONValue>]) async throws -> ReplicationSummary {
        var counts = ReplicationSummary()
        var revisions: RevisionsByDocument = [:]
        var conflicted = Set<String>()
        for row in rows where !row.id.hasPrefix("_local/") {
            let revs = row.changes.map(\.rev)
            revisions[row.id, default: []].append(contentsOf: revs)
            if revs.count > 1 { conflicted.insert(row.id) }
        }
        guard !revisions.isEmpty else { return counts }
        counts.missingChecked = revisions.values.reduce(0) { $0 + $1.count }
        let diff = try await target.send(
            RevsDiffOperation(database: target.databaseName, revisions: revisions))
        var wanted: [Wanted] = []
        for id in diff.keys.sorted() {
            guard let difference = diff[id], !difference.missing.isEmpty else { continue }
            wanted.append(Wanted(id: id, revs: difference.missing, ancestors: difference.possibleAncestors))
        }
        counts.missingFound = wanted.reduce(0) { $0 + $1.revs.count }
        guard !wanted.isEmpty else { return counts }

        // Plain documents through _bulk_get; design documents and documents with attachments one by one.
        var plain: [JSONValue] = []
        var single: [Wanted] = []
        let designs = wanted.filter { $0.id.hasPrefix("_design/") }
        single.append(contentsOf: designs)
        let others = wanted.filter { !$0.id.hasPrefix("_design/") }
        if bulkGetSupported.current, !others.isEmpty {
            let (documents, leftOver) = try await bulkGet(others)
            plain = documents
            single.append(contentsOf: leftOver)
        } else {
            single.append(contentsOf: others)
        }
        plain = plain.filter(passesFilter)
        counts.docsRead += plain.count
        if !plain.isEmpty {
            counts.add(try await write(plain, conflicted: conflicted))
        }
        for item in single {
            counts.add(try await copySingle(item, conflicted: conflicted))
        }
        if let resolver = options.conflictResolver {
            await resolveConflicts(Set(wanted.map(\.id)), resolver)
        }
        return counts
    }

    private func passesFilter(_ document: JSONValue) -> Bool {
        guard case .closure(_, let accept) = options.filter else { return true }
        return accept(document)
    }

    /// `_bulk_get?revs=true&latest=true`: the documents without attachments, and what is left to
    /// fetch one by one (documents with attachments, errors, a source without `_bulk_get`).
    private func bulkGet(_ wanted: [Wanted]) async throws -> ([JSONValue], [Wanted]) {
        let items = wanted.flatMap { want in want.revs.map { BulkGetItem(id: want.id, rev: $0) } }
        let response: BulkGetResponse<JSONValue>
        do {
            response = try await source.send(
                BulkGetOperation<JSONValue>(
                    database: source.databaseName, items: items,
                    options: DocumentReadOptions(revisions: true, latest: true)))
        } catch {
            // A source without _bulk_get (404/405/501 on the path, or 400): one by one from now on.
            let status = error.statusCode ?? 0
            guard [400, 404, 405, 415, 501].contains(status),
                !(status == 404 && error.reason == "Database does not exist.")
            else { throw error }
            bulkGetSupported.withLock { $0 = false }
            return ([], wanted)
        }
        var documents: [JSONValue] = []
        var done = Set<String>()  // "id\nrev" fetched
        for result in response.results {
            for entry in result.docs {
                guard case .found(let document) = entry else { continue }
                let attachments = document["_attachments"]?.objectValue ?? [:]
                guard attachments.isEmpty, let id = document["_id"]?.stringValue,
                    let rev = document["_rev"]?.stringValue
                else { continue }
                documents.append(document)
                done.insert(id + "\n" + rev)
            }
        }
        // latest=true may answer a newer leaf than asked: a request counts as done when its
        // revision came back as it was, otherwise it is fetched again alone.
        var leftOver: [Wanted] = []
        for want in wanted {
            let missing = want.revs.filter { !done.contains(want.id + "\n" + $0) }
            if !missing.isEmpty { leftOver.append(Wanted(id: want.id, revs: missing, ancestors: want.ancestors)) }
        }
        // A newer leaf answered for an older request would be written twice: keep each once.
        var seen = Set<String>()
        documents = documents.filter { document in
            seen.insert((document["_id"]?.stringValue ?? "") + "\n" + (document["_rev"]?.stringValue ?? "")).inserted
        }
        return (documents, leftOver)
    }

    /// `open_revs` with `revs=true&latest=true` (attachments as stubs), then one write per
    /// revision: a revision without attachments through `_bulk_docs`, one with attachments as a
    /// streamed multipart PUT sending only the attachments newer than the target's possible
    /// ancestors (what `atts_since` would send) — downloaded to and uploaded from temporary files.
    private func copySingle(_ item: Wanted, conflicted: Set<String>) async throws -> ReplicationSummary {
        var counts = ReplicationSummary()
        let documents = try await openRevisions(item)
        for document in documents where passesFilter(document) {
            counts.docsRead += 1
            let attachments = document["_attachments"]?.objectValue ?? [:]
            if attachments.isEmpty {
                counts.add(try await write([document], conflicted: conflicted))
                continue
            }
            var outcome = WriteOutcome()
            let sentAbove = AttachmentCopy.sentAbove(document, ancestors: item.ancestors)
            do {
                try await writeWithAttachments(document, sentAbove: sentAbove, conflicted: conflicted, into: &outcome)
            } catch {
                // missing_stub: the target lacks an attachment a stub points to (pruned by
                // revs_limit, say): send every attachment.
                guard error.statusCode == 412, sentAbove > 0 else { throw error }
                try await writeWithAttachments(document, sentAbove: 0, conflicted: conflicted, into: &outcome)
            }
            counts.add(outcome.summary)
        }
        return counts
    }

    private func writeWithAttachments(
        _ document: JSONValue, sentAbove: Int64, conflicted: Set<String>, into outcome: inout WriteOutcome
    ) async throws(CouchError) {
        let id = document["_id"]?.stringValue ?? ""
        do {
            _ = try await AttachmentCopy(source: source, target: target).write(document, sentAbove: sentAbove)
        } catch {
            let status = error.statusCode ?? 0
            if [401, 403, 413, 415].contains(status) || (status == 400 && Self.isAttachmentNameError(error)) {
                deny(document, error: error.error ?? "forbidden", reason: error.reason ?? error.message, into: &outcome)
                return
            }
            throw error
        }
        outcome.summary.docsWritten += 1
        hub.emit(
            .documentWritten(
                ReplicatedDocument(
                    id: id, rev: document["_rev"]?.stringValue ?? "", direction: direction,
                    deleted: document["_deleted"]?.boolValue ?? false, conflicted: conflicted.contains(id))))
    }

    /// `open_revs` for the revisions of `item`, several requests when the list would make the URL
    /// too long (CouchDB refuses request lines past about 8 KB; its replicator keeps URLs under
    /// 7,000 characters), halved again on a 414 (or a 400 for a list of more than one).
    private func openRevisions(_ item: Wanted) async throws -> [JSONValue] {
        var documents: [JSONValue] = []
        var seen = Set<String>()
        for chunk in Self.urlSizedChunks(item.revs) {
            for document in try await openRevisions(id: item.id, revs: chunk)
            where seen.insert(document["_rev"]?.stringValue ?? "").inserted {
                documents.append(document)
            }
        }
        return documents
    }

    private func openRevisions(id: String, revs: [String]) async throws(CouchError) -> [JSONValue] {
        do {
            let read = try await source.send(
                GetOpenRevisionsOperation<JSONValue>(
                    database: source.databaseName, id: id, revisions: .revisions(revs),
                    options: DocumentReadOptions(revisions: true, attachmentEncodingInfo: true, latest: true)))
            return read.compactMap(\.document)
        } catch {
            guard revs.count > 1, error.statusCode == 414 || error.statusCode == 400 else { throw error }
            let half = revs.count / 2
            return try await openRevisions(id: id, revs: Array(revs[..<half]))
                + openRevisions(id: id, revs: Array(revs[half...]))
        }
    }

    /// The revisions in lists whose `open_revs` parameter stays under 4,000 characters encoded.
    static func urlSizedChunks(_ revs: [String], limit: Int = 4_000) -> [[String]] {
        var chunks: [[String]] = []
        var current: [String] = []
        var length = 0
        for rev in revs {
            let cost = rev.utf8.count + 9  // %22…%22 and %2C
            if !current.isEmpty && length + cost > limit {
                chunks.append(current)
                current = []
                length = 0
            }
            current.append(rev)
            length += cost
        }
        if !current.isEmpty { chunks.append(current) }
        return chunks
    }

    /// What a write did.
    struct WriteOutcome {
        var summary = ReplicationSummary()
    }

    private func write(_ documents: [JSONValue], conflicted: Set<String>) async throws -> ReplicationSummary {
        try await writeBatch(documents, conflicted: conflicted).summary
    }

    /// `_bulk_docs` with `new_edits=false`; a 413 splits the batch in halves, a single document
    /// that is too large is skipped and counted; per-document refusals are skipped and counted.
    private func writeBatch(_ documents: [JSONValue], conflicted: Set<String>)
        async throws -> WriteOutcome
    {
        var outcome = WriteOutcome()
        guard !documents.isEmpty else { return outcome }
        let rows: [BulkWriteResult]
        do {
            rows = try await target.send(
                BulkDocsOperation(database: target.databaseName, documents: documents, newEdits: false))
        } catch {
            let status = error.statusCode ?? 0
            if status == 413 {
                guard documents.count > 1 else {
                    deny(documents[0], error: "too_large", reason: error.reason ?? error.message, into: &outcome)
                    return outcome
                }
                let half = documents.count / 2
                let first = try await writeBatch(Array(documents[..<half]), conflicted: conflicted)
                let second = try await writeBatch(Array(documents[half...]), conflicted: conflicted)
                outcome.summary.add(first.summary)
                outcome.summary.add(second.summary)
                return outcome
            }
            guard documents.count == 1 else { throw error }
            if [401, 403, 415].contains(status) {
                deny(
                    documents[0], error: error.error ?? "forbidden", reason: error.reason ?? error.message,
                    into: &outcome)
                return outcome
            }
            if status == 400 && Self.isAttachmentNameError(error) {
                deny(documents[0], error: error.error ?? "bad_request", reason: error.reason, into: &outcome)
                return outcome
            }
            throw error
        }
        var failed: [String: DocumentError] = [:]
        for row in rows {
            if case .failure(let failure) = row, let id = failure.id { failed[id] = failure }
        }
        for document in documents {
            let id = document["_id"]?.stringValue ?? ""
            if let failure = failed[id] {
                guard Self.skippable(failure.error) else {
                    var error = CouchError(
                        kind: .http,
                        message: "Writing document '\(id)' to the \(target.label) failed: \(failure.error) "
                            + "(\(failure.reason ?? ""))",
                        statusCode: nil, error: failure.error, reason: failure.reason)
                    error.method = "POST"
                    throw error
                }
                deny(document, error: failure.error, reason: failure.reason, into: &outcome)
                continue
            }
            outcome.summary.docsWritten += 1
            hub.emit(
                .documentWritten(
                    ReplicatedDocument(
                        id: id, rev: document["_rev"]?.stringValue ?? "", direction: direction,
                        deleted: document["_deleted"]?.boolValue ?? false, conflicted: conflicted.contains(id))))
        }
        return outcome
    }

    private func deny(_ document: JSONValue, error: String, reason: String?, into outcome: inout WriteOutcome) {
        outcome.summary.docWriteFailures += 1
        hub.emit(
            .writeDenied(
                DeniedWrite(
                    id: document["_id"]?.stringValue ?? "", rev: document["_rev"]?.stringValue,
                    direction: direction, error: error, reason: reason)))
    }

    /// The per-document errors CouchDB's replicator skips and counts: 401, 403, 413, 415 and bad
    /// attachment names.
    static func skippable(_ error: String) -> Bool {
        [
            "forbidden", "unauthorized", "too_large", "document_too_large", "attachment_too_large",
            "unsupported_media_type",
            "bad_request", "illegal_docid",
        ].contains(error)
    }

    static func isAttachmentNameError(_ error: CouchError) -> Bool {
        (error.reason ?? "").lowercased().contains("attachment")
    }

    /// Calls the resolver with the batch's documents that now have conflicts on the target.
    private func resolveConflicts(_ ids: Set<String>, _ resolver: @Sendable (ConflictBatch) async throws -> Void) async
    {
        var range = KeyRangeOptions()
        range.keys = ids.sorted().map(JSONValue.string)
        range.includeDocs = true
        range.conflicts = true
        guard let page = try? await target.store.allDocs(as: ConflictMarker.self, range: range, options: CallOptions())
        else { return }
        let conflictedIDs = page.rows.compactMap { row -> String? in
            guard let id = row.id, !(row.doc?.conflicts ?? []).isEmpty else { return nil }
            return id
        }
        guard !conflictedIDs.isEmpty else { return }
        do {
            try await resolver(ConflictBatch(database: target.store, conflictedIDs: conflictedIDs.sorted()))
        } catch {
            hub.emit(.resolverFailed(ids: conflictedIDs, message: "\(error)"))
        }
    }
}

/// A document's `_conflicts`, and nothing else of it.
private struct ConflictMarker: Decodable, Sendable {
    var conflicts: [String]?
    enum CodingKeys: String, CodingKey { case conflicts = "_conflicts" }
}
