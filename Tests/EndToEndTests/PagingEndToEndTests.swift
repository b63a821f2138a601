import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: paging by key")
struct PagingEndToEndTests {
    @Test(
        "Paging forwards then backwards over 1,000 documents in pages of 7 visits every document exactly once each way")
    func forwardsThenBackwards() async throws {
        try await withDatabase("paging") { client, db in
            let ids = (0..<1_000).map { String(format: "doc-%04d", $0) }
            var writes: [(id: String, rev: String)] = []
            for chunk in stride(from: 0, to: ids.count, by: 250) {
                let documents = ids[chunk..<min(chunk + 250, ids.count)].map { Note(_id: $0, text: $0, n: 0) }
                for result in try await client.value(BulkDocsOperation(database: db, documents: Array(documents))) {
                    if case .success(let id, let rev) = result { writes.append((id, rev)) }
                }
            }
            #expect(writes.count == ids.count)
            // Every page reads one copy of each shard, and on a cluster successive pages may reach
            // different copies: each must hold every document (a real 3-node CouchDB 3.5 lost a page's
            // worth of rows to a copy still behind after `settle`, which watches only the copies it reads).
            if (try await client.value(GetDatabaseInfoOperation(name: db)).cluster?.n ?? 1) > 1 {
                try await awaitEveryCopy(client, db, writes: writes)
            }
            try await settle(client, db)
            let query = AllDocsOperation<JSONValue>(database: db)
            var forward: [String] = []
            var pageCount = 0
            var last: KeyPage<AllDocsRow<JSONValue>>?
            for try await page in client.pages(query, pageSize: 7) {
                #expect(page.rows.count <= 7)
                #expect((page.previous == nil) == (pageCount == 0))
                forward += page.rows.compactMap(\.id)
                pageCount += 1
                last = page
            }
            #expect(pageCount == 143)  // 142 full pages and one of 6
            #expect(forward == ids)
            #expect(last?.next == nil)

            // Back from the last page, through its `previous` token, to the first.
            var backward: [String] = last.map { $0.rows.compactMap(\.id) } ?? []
            var token = last?.previous
            var backPages = 1
            while let current = token {
                // The token survives a round trip through its string form.
                let restored = try #require(PageToken(rawValue: current.rawValue))
                let page = try await client.value(KeyPageOperation(query, pageSize: 7, token: restored))
                #expect(page.rows.count == 7)
                backward = page.rows.compactMap(\.id) + backward
                token = page.previous
                backPages += 1
            }
            #expect(backPages == pageCount)
            #expect(backward == ids)
            #expect(Set(backward).count == 1_000)
        }
    }

    @Test("Paging refuses queries that set limit, skip or keys")
    func validation() async {
        var options = KeyRangeOptions()
        options.limit = 3
        let client = E2EEnvironment.shared.client()
        do {
            _ = try await client.value(
                KeyPageOperation(AllDocsOperation<JSONValue>(database: "db", options: options), pageSize: 5))
            Issue.record("expected a validation error")
        } catch {
            #expect(error.kind == .validation)
        }
    }
}

@Suite("End to end: paging by bookmark")
struct BookmarkPagingEndToEndTests {
    @Test("_find pages of 7 by bookmark: every matching document exactly once, as pages, rows and queued operations")
    func findPages() async throws {
        try await withDatabase("bookmarks") { client, db in
            let written = try await client.value(
                BulkDocsOperation(
                    database: db, documents: (0..<60).map { Note(_id: String(format: "b%03d", $0), text: "", n: $0) }))
            // Every page may be read from any copy of a shard: wait until every copy has every document.
            try await awaitEveryCopy(
                client, db, writes: written.compactMap { row in row.rev.map { (row.id ?? "", $0) } })
            let query = FindOperation<Note>(database: db, selector: .field("n").greaterThanOrEqual(10))
            // `_find` reads one copy of each shard: on a cluster, wait until the copies have every write.
            var whole = query
            whole.query.limit = 100
            let everything = try await converged(
                read: { try await client.value(whole) }, until: { $0.docs.count == 50 })
            #expect(everything.docs.count == 50)
            var seen: [Int] = []
            var pageCount = 0
            for try await page in client.pages(query, pageSize: 7) {
                #expect(page.rows.count <= 7)
                seen += page.rows.map(\.n)
                pageCount += 1
            }
            #expect(seen.sorted() == Array(10..<60))
            #expect(Set(seen).count == 50)
            #expect(pageCount == 8)
            var rows: [Int] = []
            for try await note in client.pagedRows(query, pageSize: 20) { rows.append(note.n) }
            #expect(rows.sorted() == Array(10..<60))
            let first = try await client.value(BookmarkPageOperation(query, pageSize: 45))
            let second = try await client.value(BookmarkPageOperation(query, pageSize: 45, bookmark: first.next))
            #expect(first.rows.count == 45)
            #expect(second.rows.count == 5)
            #expect(second.next == nil)
            #expect(Set(first.rows.map(\.n)).isDisjoint(with: second.rows.map(\.n)))
        }
    }
}

/// Issue 8 item 10: a slow consumer must not make the client fetch (and hold) every page.
@Suite("End to end: paging stays at most one page ahead")
struct PagingMemoryBoundEndToEndTests {
    @Test("pages() and pagedRows() request at most one page ahead of the consumer, for keys and bookmarks")
    func atMostOnePageAhead() async throws {
        try await withPrivateTestServer(for: "paging one page ahead") { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("pageahead")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            _ = try await client.value(
                BulkDocsOperation(
                    database: db, documents: (0..<100).map { Note(_id: String(format: "p%03d", $0), text: "", n: $0) }))
            let byKey = AllDocsOperation<JSONValue>(database: db)
            let byBookmark = FindOperation<Note>(database: db, selector: .field("n").greaterThanOrEqual(0))
            let requests = { (path: String) in server.requestCount(path: "/\(db)/\(path)") }

            var keyPages = client.pages(byKey, pageSize: 5).makeAsyncIterator()
            _ = try await keyPages.next()
            try await Task.sleep(nanoseconds: 300_000_000)  // time enough to run ahead, were it to
            #expect(requests("_all_docs") <= 2)
            var keyPageCount = 1
            while try await keyPages.next() != nil { keyPageCount += 1 }
            #expect(keyPageCount == 20)

            var bookmarkRows = client.pagedRows(byBookmark, pageSize: 5).makeAsyncIterator()
            _ = try await bookmarkRows.next()
            try await Task.sleep(nanoseconds: 300_000_000)
            #expect(requests("_find") <= 2)
            var rowCount = 1
            while try await bookmarkRows.next() != nil { rowCount += 1 }
            #expect(rowCount == 100)
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}
