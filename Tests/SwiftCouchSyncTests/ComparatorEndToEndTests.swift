import CouchTestServer
import Foundation
import SwiftCouch
import Testing

/// The revision-tree comparator proven: it reports every kind of difference (and names the document,
/// the revision and what differs), and it finds nothing on a copy made by the server's own replicator
/// (the TestServer's `POST /_replicate`, or CouchDB's with `COUCHDB_URL`), which is the ground truth.
@Suite struct ComparatorEndToEndTests {
    /// A tree with two leaves, one with an attachment.
    static let sample: TreeSnapshot = {
        let attachment = AttachmentInfo(
            digest: "md5-abc", revpos: 1, length: 10, contentType: "text/plain", bytes: "10 bytes, fnv1a 1")
        let live = LeafRevision(
            deleted: false, path: ["2-b", "1-a"], body: ["x": 1], attachments: ["a.txt": attachment])
        let gone = LeafRevision(deleted: true, path: ["2-c", "1-a"], body: [:], attachments: [:])
        let tree = DocumentTree(
            leaves: ["2-b": live, "2-c": gone], winner: "2-b", winnerDeleted: false, conflicts: [],
            deletedConflicts: ["2-c"])
        return TreeSnapshot(documents: ["doc": tree, "other": DocumentTree(winner: "1-z")])
    }()

    @Test func everyKindOfDifferenceIsReported() {
        #expect(RevisionTrees.differences(expected: Self.sample, actual: Self.sample).isEmpty)
        typealias Mutation = (inout TreeSnapshot) -> Void
        let cases: [(TreeDifference.Kind, String?, Mutation)] = [
            (.missingDocument, nil, { $0.documents["other"] = nil }),
            (.extraDocument, nil, { $0.documents["new"] = DocumentTree() }),
            (.missingLeaf, "2-c", { $0.documents["doc"]!.leaves["2-c"] = nil }),
            (.extraLeaf, "2-d", { $0.documents["doc"]!.leaves["2-d"] = $0.documents["doc"]!.leaves["2-c"] }),
            (.deletedFlag, "2-c", { $0.documents["doc"]!.leaves["2-c"]!.deleted = false }),
            (.revisionPath, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.path = ["2-b"] }),
            (.body, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.body = ["x": 2] }),
            (.missingAttachment, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.attachments = [:] }),
            (
                .extraAttachment, "2-c",
                { $0.documents["doc"]!.leaves["2-c"]!.attachments["b"] = AttachmentInfo() }
            ),
            (.attachmentDigest, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.attachments["a.txt"]!.digest = "md5-x" }),
            (.attachmentRevpos, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.attachments["a.txt"]!.revpos = 2 }),
            (.attachmentLength, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.attachments["a.txt"]!.length = 9 }),
            (
                .attachmentContentType, "2-b",
                { $0.documents["doc"]!.leaves["2-b"]!.attachments["a.txt"]!.contentType = "text/html" }
            ),
            (.attachmentBytes, "2-b", { $0.documents["doc"]!.leaves["2-b"]!.attachments["a.txt"]!.bytes = "9 bytes" }),
            (.winner, nil, { $0.documents["doc"]!.winner = "2-c" }),
            (.winner, nil, { $0.documents["doc"]!.winnerDeleted = true }),
            (.conflicts, nil, { $0.documents["doc"]!.conflicts = ["2-c"] }),
            (.deletedConflicts, nil, { $0.documents["doc"]!.deletedConflicts = [] }),
        ]
        #expect(Set(cases.map(\.0)) == Set(TreeDifference.Kind.allCases), "a case for every kind")
        for (kind, rev, mutate) in cases {
            var actual = Self.sample
            mutate(&actual)
            let found = RevisionTrees.differences(expected: Self.sample, actual: actual)
            #expect(found.count == 1 && found.first?.kind == kind && found.first?.rev == rev, "\(kind): \(found)")
        }
        // A filter on ids leaves the others out.
        var actual = Self.sample
        actual.documents["other"] = nil
        #expect(RevisionTrees.differences(expected: Self.sample, actual: actual, ids: ["doc"]).isEmpty)
    }

    /// The small corpus copied by the server's replicator compares identical; then changes on either side
    /// are each reported, on the right document and revision.
    @Test func aServerCopyIsIdenticalAndChangesAreFound() async throws {
        try await withRemoteDatabases("cmp", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            let corpus = try await Corpus.build(in: source, spec: .small)
            try await serverReplicate(source, target)
            let (identical, copied, _) = try await RevisionTrees.compareWithSnapshots(source, target)
            #expect(identical.isEmpty, "\(identical.prefix(25).map(\.description).joined(separator: "\n"))")
            #expect(corpus.shapeProblems(in: copied).isEmpty, "\(corpus.shapeProblems(in: copied))")
            #expect(try await corpus.localDocumentsPresent(in: target).isEmpty, "_local documents never replicate")

            // An extra leaf on the target, a new document and a new revision on the source, and a tombstone.
            try await Corpus.replicatedWrite(
                target,
                [["_id": "doc-0001", "_rev": "9-feedface", "_revisions": ["start": 9, "ids": ["feedface"]], "x": 1]])
            try await source.json(.put, ["brand-new"], body: ["fresh": true])
            let one = try await source.json(.get, ["doc-0002"])
            let updated = try await source.json(
                .put, ["doc-0002"], body: ["_rev": one["_rev"]!, "changed": true])
            let found = try await RevisionTrees.compare(source, target, settle: 0)
            let described = found.map(\.description).joined(separator: "\n")
            #expect(
                found.contains { $0.id == "doc-0001" && $0.kind == .extraLeaf && $0.rev == "9-feedface" },
                "\(described)")
            #expect(found.contains { $0.id == "doc-0001" && $0.kind == .winner }, "\(described)")
            #expect(found.contains { $0.id == "doc-0001" && $0.kind == .conflicts }, "\(described)")
            #expect(found.contains { $0.id == "brand-new" && $0.kind == .missingDocument }, "\(described)")
            #expect(
                found.contains {
                    $0.id == "doc-0002" && $0.kind == .missingLeaf && $0.rev == updated["rev"]?.stringValue
                },
                "\(described)")
            #expect(found.contains { $0.id == "doc-0002" && $0.kind == .extraLeaf }, "\(described)")
            #expect(Set(found.map(\.id)) == ["doc-0001", "brand-new", "doc-0002"], "\(described)")
        }
    }

    /// The corpus copied by the server's own replicator: identical trees. Against the TestServer this checks
    /// the TestServer's replicator; with `COUCHDB_URL`, it validates the comparator against CouchDB itself.
    /// The full corpus (1,000 documents, conflicts of 10, 100 and 210 leaves, attachments of 2 MB and 6.6 MB)
    /// with `SWIFTCOUCH_SYNC_FULL_CORPUS=1` (the default run copies it with SwiftCouch's replicator in
    /// `CorpusReplicationEndToEndTests`), else the small one.
    @Test func theServersReplicatorCopiesTheCorpusIdentically() async throws {
        try await withRemoteDatabases("cmp-full", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            let corpus = try await Corpus.build(in: source, spec: .onRequest)
            let answer = try await serverReplicate(source, target)
            #expect(answer["ok"] == true, "\(answer)")
            let history = answer["history"]?[0]
            #expect(history?["doc_write_failures"]?.intValue ?? 0 == 0, "\(answer)")
            let (found, _, snapshot) = try await RevisionTrees.compareWithSnapshots(source, target)
            #expect(found.isEmpty, "\(found.prefix(25).map(\.description).joined(separator: "\n"))")
            #expect(try await corpus.localDocumentsPresent(in: target).isEmpty, "_local documents never replicate")
            #expect(corpus.shapeProblems(in: snapshot).isEmpty, "\(corpus.shapeProblems(in: snapshot))")
        }
    }
}

/// `POST /_replicate` on the endpoints' server (both databases of one server), with URL endpoints and the
/// admin's credentials as CouchDB 3 requires.
@discardableResult
func serverReplicate(_ source: Endpoint, _ target: Endpoint, extra: [String: JSONValue] = [:]) async throws
    -> JSONValue
{
    let environment = SyncEnvironment.shared
    let authorization =
        "Basic "
        + Data("\(environment.credentials.username):\(environment.credentials.password)".utf8).base64EncodedString()
    func endpoint(_ e: Endpoint) -> JSONValue {
        let base =
            environment.url.absoluteString.hasSuffix("/")
            ? String(environment.url.absoluteString.dropLast()) : environment.url.absoluteString
        let name = e.database.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(["-", "_"])) ?? ""
        return ["url": .string("\(base)/\(name)"), "headers": ["Authorization": .string(authorization)]]
    }
    var body: [String: JSONValue] = ["source": endpoint(source), "target": endpoint(target)]
    for (k, v) in extra { body[k] = v }
    let op = try GenericOperation(method: .post, path: CouchPath("_replicate"), jsonBody: JSONValue.object(body))
    // A one-shot _replicate answers when the copy is done: a full corpus takes a while on a loaded machine.
    return try await source.client.value(GenericJSONOperation<JSONValue>(op), options: CallOptions(timeout: 600))
}
