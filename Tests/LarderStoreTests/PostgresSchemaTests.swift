import Dispatch
import Foundation
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Migrations on PostgreSQL, and names that would be SQL if they were spliced in.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PostgresSchemaTests {
    @Test func serversStartingTogetherOnAnEmptyDatabaseMigrateItOnce() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            do {
                let store = try PostgresStore(url: schema.url)
                _ = try store.create("c", id: nil, data: ["n": 1])
                store.close()
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
        let count = PGSchema.migrations(trgm: "public").count
        #expect(try PGSchema.version(connection) == Int64(count))
        let rows = try connection.run([PGStatement("SELECT count(*) FROM larder_migrations")])[0].int(0, 0)
        #expect(rows == Int64(count))
        #expect(try connection.run([PGStatement("SELECT count(*) FROM documents")])[0].int(0, 0) == 4)
    }

    @Test func aDatabaseWithANewerSchemaIsRefused() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        try PostgresStore(url: schema.url).close()
        try PGAdmin.execute(schema.url, "INSERT INTO larder_migrations(version, name) VALUES (99, 'from the future')")
        do {
            _ = try PostgresStore(url: schema.url)
            Issue.record("a newer schema was opened")
        } catch {
            #expect(error.message.contains("schema version 99, newer than"), "\(error)")
        }
    }

    @Test func migrationsRunInATransactionEach() throws {
        // A failing migration leaves nothing behind: run the first migration's SQL on a schema that already has one
        // of its tables, and the others must not exist afterwards.
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        try PGAdmin.execute(schema.url, "CREATE TABLE blobs(x int)")
        #expect(throws: LarderError.self) { _ = try PostgresStore(url: schema.url) }
        let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
        #expect(try PGSchema.version(connection) == 0)
        #expect(try connection.run([PGStatement("SELECT to_regclass('documents') IS NULL")])[0].bool(0, 0))
    }

    @Test func aDeclaredIndexServesFiltersAndSortsOnItsField() throws {
        try withStore(.postgres) { store in
            let postgres = try #require(store as? PostgresStore)
            for n in 0..<3_000 {
                _ = try store.create("items", id: nil, data: ["price": .int(Int64(n % 500)), "name": .string("item \(n)")])
            }
            let price = try FieldPath("price")
            let query = SearchQuery(
                filter: .compare(price, .lt, 10), sort: [SortKey(field: price, descending: true)], limit: 5)
            let before = try postgres.explain("items", query)
            #expect(!before.contains("lx_"), "\(before)")
            _ = try store.createIndex("items", field: price)
            try PGAdmin.execute(url: postgres.settings.url, "ANALYZE documents")
            let after = try postgres.explain("items", query)
            #expect(after.contains("Index") && after.contains("lx_"), "\(after)")
            let page = try store.search("items", query)
            #expect(page.records.compactMap { try? $0.decodedData()["price"] } == [9, 9, 9, 9, 9])
        }
    }

    @Test func aCollectionGetsItsTrigramIndexAtItsFirstLongSubstringSearch() throws {
        try withStore(.postgres) { store in
            let postgres = try #require(store as? PostgresStore)
            for n in 0..<2_000 {
                _ = try store.create("students", id: nil, data: ["name": .string("學生 \(n)"), "city": "北京市海淀区"])
            }
            _ = try store.create("other", id: nil, data: ["name": "x"])
            let name = PGTextIndexer.indexName("students")
            let query = SearchQuery(text: TextQuery(query: "學生 1999"), limit: 5)
            #expect(!postgres.textIndexer.isCovered("students"))
            // Two characters never ask for it; three do, and the search is exact before the index exists.
            #expect(try store.count("students", filter: nil, text: TextQuery(query: "學生")) == 2_000)
            postgres.textIndexer.settle()
            #expect(!postgres.textIndexer.isCovered("students"))
            #expect(try store.search("students", query).records.count == 1)
            postgres.textIndexer.settle()
            #expect(postgres.textIndexer.isCovered("students"))
            #expect(!postgres.textIndexer.isCovered("other"))
            try PGAdmin.execute(url: postgres.settings.url, "ANALYZE documents")
            #expect(try postgres.explain("students", query).contains(name))
            #expect(try store.search("students", query).records.count == 1)
            _ = try store.dropCollection("students")
            #expect(!postgres.textIndexer.isCovered("students"))
            postgres.textIndexer.settle()  // the index goes after the drop, on the indexer's queue
            let left = try PGConnection(settings: postgres.settings, timeoutMs: 10_000).run([
                PGStatement("SELECT to_regclass($1) IS NULL", [.text(name)])
            ])[0]
            #expect(left.bool(0, 0))
        }
    }

    /// Creates in one batch go out together on PostgreSQL (`PGWriteContext`): a taken id must still answer CONFLICT,
    /// log nothing, and leave the rest of the batch alone.
    @Test(arguments: StoreKind.allCases)
    func createsOfOneIdInOneBatchLetExactlyOneThrough(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            let shared = UUID()
            let outcomes = try await withThrowingTaskGroup(of: (Bool, Status?).self) { group in
                for n in 0..<40 {
                    group.addTask {
                        do {
                            _ = try await store.write { (context) throws(LarderError) in
                                try context.create("c", id: n % 2 == 0 ? shared : nil, data: ["n": .int(Int64(n))])
                            }
                            return (n % 2 == 0, nil)
                        } catch {
                            return (n % 2 == 0, (error as? LarderError)?.status)
                        }
                    }
                }
                var all: [(Bool, Status?)] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            #expect(outcomes.filter { !$0.0 }.allSatisfy { $0.1 == nil })
            #expect(outcomes.filter { $0.0 && $0.1 == nil }.count == 1)
            #expect(outcomes.filter { $0.0 && $0.1 == .conflict }.count == 19)
            #expect(try store.count("c", filter: nil, text: nil) == 21)
            let log = try store.changes(after: 0, collection: "c", limit: 100, maxBytes: 1 << 20)
            #expect(log.entries.count == 21 && log.lastSeq == 21)
            #expect(Set(log.entries.compactMap { $0.record?.id }).count == 21)
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aBodyThatGoesOnAfterARefusedCreateIsUndone(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            let taken = try store.create("c", id: nil, data: ["n": 0]).id
            let other = UUID()
            let result = try? await store.write { (context) throws(LarderError) in
                _ = try context.create("c", id: taken, data: ["n": 1])
                return try context.create("c", id: other, data: ["n": 2])
            }
            #expect(result == nil)
            expectError(.notFound) { _ = try store.get("c", id: other) }
            #expect(try store.get("c", id: taken).data == Array(#"{"n":0}"#.utf8))
            #expect(try store.changes(after: 0, collection: nil, limit: 10, maxBytes: 1 << 20).entries.count == 1)
        }
    }

    /// Hostile text where SQL would be if names were spliced in: refused when the rules forbid it, otherwise stored
    /// and queried as the plain name it is.
    @Test(arguments: StoreKind.allCases)
    func hostileNamesAreRefusedOrTakenLiterally(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for name in ["a'); drop table x; --", "\"", "a\u{0}b", "documents; DROP TABLE documents", "x'||'y"] {
                expectError(.invalidArgument, field: "collection") { _ = try store.create(name, id: nil, data: [:]) }
                expectError(.invalidArgument, field: "collection") { _ = try store.search(name, SearchQuery()) }
            }
            for path in ["a\"b", "a\u{0}b", "q\"->'x"] {
                #expect(throws: LarderError.self) { _ = try FieldPath(path) }
            }
            let keys = [
                "a'); drop table documents; --", "it's", "back\\slash", "semi;colon", "E'x'", "\\'", "q->>'x'",
                "'); SELECT pg_sleep(10); --",
            ]
            for (n, key) in keys.enumerated() {
                var data: JSONObject = [key: .int(Int64(n))]
                data["nested"] = .object([key: .string(key)])
                _ = try store.create("c", id: nil, data: data)
            }
            for (n, key) in keys.enumerated() {
                let path = try FieldPath(segments: [key])
                let nested = try FieldPath(segments: ["nested", key])
                #expect(try store.count("c", filter: .compare(path, .eq, .int(Int64(n))), text: nil) == 1)
                #expect(try store.count("c", filter: .compare(nested, .eq, .string(key)), text: nil) == 1)
                _ = try store.createIndex("c", field: nested)
                let page = try store.search("c", SearchQuery(sort: [SortKey(field: nested, descending: true)], limit: 3))
                #expect(page.records.count == 3)
                let groups = try store.group("c", field: path, filter: nil, text: nil, perGroup: 1)
                #expect(groups.map(\.count).reduce(0, +) == keys.count)
                #expect(try store.count("c", filter: nil, text: TextQuery(query: key, fields: [nested])) >= 1)
            }
            #expect(try store.collections().map(\.count) == [keys.count])
        }
    }
}

extension PGAdmin {
    static func execute(_ url: String, _ sql: String) throws { try execute(url: url, sql) }
}
