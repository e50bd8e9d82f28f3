import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The plan SQLite picks for a search that filters on two indexed fields: the equality's index, never a walk of the
/// other field's range (or of the whole collection in id order) testing the equality on every row.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PlannerStatsTests {
    static let twoFilters = #"{"filter":{"and":[{"field":"group","op":"eq","value":7},{"field":"n","op":"gte","value":40}]}}"#

    /// 1,000 documents, `group` = n % 100, with `group` and `n` indexed; the names of the two indexes.
    static func seed(_ store: SQLiteStore) throws -> (group: String, n: String) {
        for n in 0..<1_000 { _ = try store.create("items", id: nil, data: ["n": .int(Int64(n)), "group": .int(Int64(n % 100))]) }
        let group = try store.createIndex("items", field: try FieldPath("group")).name
        let n = try store.createIndex("items", field: try FieldPath("n")).name
        return (group, n)
    }

    static func checkPlan(_ store: SQLiteStore, group: String, n: String) throws {
        let query = try SearchQuery(json: try object(twoFilters))
        let plan = try store.explain("items", query)
        #expect(plan.contains("USING INDEX \(group) (collection=? AND <expr>=?)"), "\(plan)")
        #expect(!plan.contains(n) && !plan.contains("documents_id"), "\(plan)")
        let page = try store.search("items", query)
        let found = try page.records.map { record -> Int64 in
            guard case .int(let value)? = try JSONParser.parseObject(record.data)["n"] else { return -1 }
            return value
        }
        #expect(found == [107, 207, 307, 407, 507, 607, 707, 807, 907], "\(found)")
    }

    @Test func twoFilterSearchReadsTheEqualitysIndex() throws {
        try withStore { store, _ in
            let (group, n) = try PlannerStatsTests.seed(store)
            try PlannerStatsTests.checkPlan(store, group: group, n: n)
        }
    }

    /// A data directory whose indexes were created before the planner was told about them gets the same plan once
    /// opened by this version.
    @Test func indexesCreatedBeforeGetTheSamePlan() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-stats-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var names = (group: "", n: "")
        try withStore({ $0.dataDirectory = directory }) { store, _ in names = try PlannerStatsTests.seed(store) }
        do {
            // As a version before the statistics left it: none, and their migration and those after it not applied.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("DELETE FROM sqlite_stat1")
            try db.run("DELETE FROM larder_migrations WHERE version >= ?1", [.int(SQLiteSchema.plannerStatsVersion)])
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            try PlannerStatsTests.checkPlan(store, group: names.group, n: names.n)
        }
    }
}
