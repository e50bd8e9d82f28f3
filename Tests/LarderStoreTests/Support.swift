import Foundation
import LarderTestSupport
import LarderWire
import Testing

@testable import LarderStore

/// The stores the conformance tests run against: the same test code for each.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}

typealias AnyStore = any GroupCommitStore

/// A fresh store of `kind` (a temporary directory, or a schema of its own on the tests' PostgreSQL), closed and
/// removed when `body` returns.
func withStore<T>(
    _ kind: StoreKind, _ configure: (inout StoreConfiguration) -> Void = { _ in }, _ body: (AnyStore) throws -> T
) throws -> T {
    switch kind {
    case .sqlite:
        return try withStore(configure) { store, _ in try body(store) }
    case .postgres:
        let opened = try PostgresTestStore(configure)
        defer { opened.close() }
        return try body(opened.store)
    }
}

/// `withStore(kind)` for async bodies.
func withStoreAsync(
    _ kind: StoreKind, _ configure: (inout StoreConfiguration) -> Void = { _ in }, _ body: (AnyStore) async throws -> Void
) async throws {
    switch kind {
    case .sqlite:
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-store-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = StoreConfiguration(dataDirectory: directory)
        configure(&configuration)
        let store = try SQLiteStore(configuration: configuration)
        defer { store.close() }
        try await body(store)
    case .postgres:
        let opened = try PostgresTestStore(configure)
        defer { opened.close() }
        try await body(opened.store)
    }
}

/// A PostgreSQL store in a schema of its own on the tests' cluster; `close` closes it and drops the schema.
struct PostgresTestStore {
    let schema: TestSchema
    let store: PostgresStore

    init(_ configure: (inout StoreConfiguration) -> Void) throws {
        schema = try TestPostgres.newSchema()
        var configuration = StoreConfiguration(dataDirectory: "/nonexistent")
        configure(&configuration)
        do {
            store = try PostgresStore(url: schema.url, configuration: configuration)
        } catch {
            schema.drop()
            throw error
        }
    }

    func close() {
        store.close()
        schema.drop()
    }
}

/// A store of `kind` holding every seed record, in file order.
func withSeededStore<T>(
    _ kind: StoreKind, _ configure: (inout StoreConfiguration) -> Void = { _ in }, _ body: (AnyStore) throws -> T
) throws -> T {
    try withStore(kind, configure) { store in
        for (collection, records) in try seedRecords() {
            for record in records { _ = try store.create(collection, id: nil, data: record) }
        }
        return try body(store)
    }
}

/// A store in a fresh temporary directory, removed when the test's `body` returns.
func withStore<T>(
    _ configure: (inout StoreConfiguration) -> Void = { _ in }, _ body: (SQLiteStore, String) throws -> T
) throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-store-\(UUID().wireString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var configuration = StoreConfiguration(dataDirectory: directory)
    configure(&configuration)
    let store = try SQLiteStore(configuration: configuration)
    defer { store.close() }
    return try body(store, directory)
}

func fixture(_ name: String) throws -> [UInt8] {
    let url = try #require(Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil))
    return Array(try Data(contentsOf: url))
}

/// The seed records by collection.
func seedRecords() throws -> [(String, [JSONObject])] {
    let root = try JSONParser.parseObject(try fixture("seed-records.json"))
    return root.map { (key, value) in (key, (value.arrayValue ?? []).compactMap(\.objectValue)) }
}

/// A store holding every seed record, in file order.
func withSeededStore<T>(
    _ configure: (inout StoreConfiguration) -> Void = { _ in }, _ body: (SQLiteStore, String) throws -> T
) throws -> T {
    try withStore(configure) { store, directory in
        for (collection, records) in try seedRecords() {
            for record in records { _ = try store.create(collection, id: nil, data: record) }
        }
        return try body(store, directory)
    }
}

func object(_ text: String) throws -> JSONObject { try JSONParser.parseObject(Array(text.utf8)) }

/// Expects `body` to throw a LarderError with `status` (and `field` when given).
func expectError(
    _ status: Status, field: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("expected \(status.name), got success", sourceLocation: sourceLocation)
    } catch let error as LarderError {
        #expect(error.status == status, "\(error)", sourceLocation: sourceLocation)
        if let field { #expect(error.field == field, "\(error)", sourceLocation: sourceLocation) }
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}

extension StoredRecord {
    func string(_ key: String) -> String? { (try? decodedData())?[key]?.stringValue }
}
