import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Each record's `$owner` kept in a column of its own: what a user's reads compare under an `owner` rule, on both
/// stores, and the migration that fills it in a store of the format before it.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct OwnerColumnTests {
    static let todo = CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner)

    static func owned(_ owner: String) throws -> Filter {
        try Filter(json: ["field": "$owner", "op": "eq", "value": .string(owner)])
    }

    /// The ids of `owner`'s todos, in id order.
    static func ids(_ store: AnyStore, ownedBy owner: String) throws -> [UUID] {
        var query = SearchQuery()
        query.filter = try owned(owner)
        query.sort = [SortKey(field: try FieldPath("id"), descending: false)]
        return try store.search("todos", query).records.map(\.id)
    }

    /// Ann's two todos, Bob's one and one nobody owns (written by a role token); the index a rules change declared on
    /// `$owner` in the format before the column.
    static func seed(_ store: AnyStore) throws -> (ann: [UUID], bob: UUID) {
        let ann = try (1...2).map { n in
            try store.create("todos", id: nil, data: ["$owner": "ann", "title": .string("ann \(n)")]).id
        }
        let bob = try store.create("todos", id: nil, data: ["$owner": "bob", "title": "bob"]).id
        _ = try store.create("todos", id: nil, data: ["title": "nobody's", "$owner": 7])
        try store.syncWrite { context throws(LarderError) in
            try context.setCollectionRules("todos", OwnerColumnTests.todo)
        }
        return (ann.sorted(), bob)
    }

    /// What a user sees follows the column through every write: a patch keeps the owner, a write naming another moves
    /// the record, a replace without one leaves it nobody's.
    static func checkOwners(_ store: AnyStore, ann: [UUID], bob: UUID) throws {
        #expect(try ids(store, ownedBy: "ann") == ann)
        #expect(try ids(store, ownedBy: "bob") == [bob])
        #expect(try store.count("todos", filter: try owned("carol"), text: nil) == 0)
        _ = try store.patch("todos", id: ann[0], patch: ["done": true], expectedRev: nil)
        #expect(try ids(store, ownedBy: "ann") == ann)
        _ = try store.patch("todos", id: ann[1], patch: ["$owner": "bob"], expectedRev: nil)
        #expect(try ids(store, ownedBy: "ann") == [ann[0]])
        #expect(try Set(ids(store, ownedBy: "bob")) == [bob, ann[1]])
        _ = try store.replace("todos", id: bob, data: ["title": "given away"], expectedRev: nil)
        #expect(try ids(store, ownedBy: "bob") == [ann[1]])
        #expect(try store.count("todos", filter: .not(try owned("bob")), text: nil) == 3)
    }

    @Test(arguments: StoreKind.allCases) func aUsersReadsCompareTheOwnerColumn(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let (ann, bob) = try OwnerColumnTests.seed(store)
            try OwnerColumnTests.checkOwners(store, ann: ann, bob: bob)
        }
    }

    /// A `$owner` the column cannot hold (longer than it keeps, or holding NUL) is written, and compared in the
    /// record: PostgreSQL's index takes no entry that large, and no user id is such a string.
    @Test(arguments: StoreKind.allCases) func ownersTheColumnCannotHoldAreComparedInTheRecord(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let long = String(repeating: "x", count: 3_000)
            let longs = try store.create("todos", id: nil, data: ["$owner": .string(long), "title": "long"]).id
            _ = try store.create("todos", id: nil, data: ["$owner": "ann\u{0}x", "title": "held"])
            let anns = try store.create("todos", id: nil, data: ["$owner": "ann", "title": "ann's"]).id
            #expect(try OwnerColumnTests.ids(store, ownedBy: long) == [longs])
            #expect(try OwnerColumnTests.ids(store, ownedBy: "ann") == [anns])
            _ = try store.patch("todos", id: longs, patch: ["done": true], expectedRev: nil)
            #expect(try OwnerColumnTests.ids(store, ownedBy: long) == [longs])
            let reads = store.pointReads()
            defer { reads.end() }
            #expect(try reads.getJSON("todos", id: longs, ownedBy: long) == reads.getJSON("todos", id: longs))
        }
    }

    /// Another user's record and a missing id: the same error, found by the same steps (a search of the owner index
    /// on collection, owner and id, which the two miss alike; the record's row is not read).
    @Test func aPointReadOfAnotherUsersRecordTakesAMissingIdsSteps() throws {
        try withStore { store, _ in
            let (ann, _) = try OwnerColumnTests.seed(store)
            let reads = store.pointReads()
            defer { reads.end() }
            #expect(try reads.getJSON("todos", id: ann[0], ownedBy: "ann") == reads.getJSON("todos", id: ann[0]))
            let missing = UUID()
            var errors: [String] = []
            for (id, expected) in [(ann[0], ann[0]), (missing, missing)] {
                do {
                    _ = try reads.getJSON("todos", id: id, ownedBy: "bob")
                    Issue.record("bob read \(id.wireString)")
                } catch let error as LarderError {
                    #expect(error.status == .notFound)
                    errors.append(error.message.replacingOccurrences(of: expected.wireString, with: "ID"))
                }
            }
            #expect(errors.count == 2 && errors[0] == errors[1], "\(errors)")
            let plan = try store.readers.read { db throws(LarderError) in
                try db.query("EXPLAIN QUERY PLAN " + FixedSQL.selectOwnedRecord.sql, [.text("todos"), .text(""), .text("")]) {
                    $0.text(3)
                }
            }
            #expect(plan == ["SEARCH documents USING INDEX documents_owner (collection=? AND owner=? AND id=?)"], "\(plan)")
        }
    }

    /// A data directory of the format before the column: its records get their owners, and the index setting the
    /// rules declared on `$owner` goes (the column's index serves it).
    @Test func anOldSQLiteDataDirectoryGetsItsOwners() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-owner-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var seeded: (ann: [UUID], bob: UUID) = ([], UUID())
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            seeded = try OwnerColumnTests.seed(store)
            _ = try store.createIndex("todos", field: FieldPath.owner)
        }
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("DROP INDEX documents_owner; ALTER TABLE documents DROP COLUMN owner")
            try db.run("DELETE FROM larder_migrations WHERE version >= ?1", [.int(SQLiteSchema.ownerColumnVersion)])
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let indexes = try store.readers.read { db throws(LarderError) in
                try db.query("SELECT path FROM field_indexes WHERE collection = 'todos'") { $0.text(0) }
            }
            #expect(indexes == [])
            try OwnerColumnTests.checkOwners(store, ann: seeded.ann, bob: seeded.bob)
        }
    }

    /// The same on PostgreSQL: a database of the format before the column (with a key on seq, which no query used)
    /// is migrated when a server opens it, and every write still finds its row.
    @Test func anOldPostgreSQLDatabaseGetsItsOwners() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        var seeded: (ann: [UUID], bob: UUID) = ([], UUID())
        do {
            let store = try PostgresStore(url: schema.url)
            defer { store.close() }
            seeded = try OwnerColumnTests.seed(store)
            _ = try store.createIndex("todos", field: FieldPath.owner)
        }
        // As the format before it left the database: no owner column, and a key on seq.
        try PGAdmin.execute(
            url: schema.url,
            """
            DROP INDEX documents_owner; ALTER TABLE documents DROP COLUMN owner;
            ALTER TABLE documents REPLICA IDENTITY DEFAULT; ALTER TABLE documents ADD PRIMARY KEY (seq);
            DELETE FROM larder_migrations WHERE version >= (SELECT version FROM larder_migrations WHERE name = 'record owners')
            """)
        let store = try PostgresStore(url: schema.url)
        defer { store.close() }
        let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
        let indexes = try connection.run([PGStatement("SELECT count(*) FROM field_indexes WHERE path = '$owner'")])[0]
        #expect(indexes.int(0, 0) == 0)
        let keys = try connection.run([
            PGStatement("SELECT count(*) FROM pg_constraint WHERE conrelid = 'documents'::regclass AND contype = 'p'")
        ])[0]
        #expect(keys.int(0, 0) == 0)
        try OwnerColumnTests.checkOwners(store, ann: seeded.ann, bob: seeded.bob)
    }
}
