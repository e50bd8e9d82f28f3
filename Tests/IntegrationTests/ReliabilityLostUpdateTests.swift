import Foundation
import LarderClient
import LarderTestThreads
import LarderWire
import Testing

/// No lost updates: many clients add 1 to one counter with revision-checked writes, retrying on CONFLICT;
/// the final value is exactly the number of increments, and the revision says no write was applied twice.
@Suite(
    .ownThreads,
    ReliabilityKnobs.timeLimit(
        plus: ReliabilityKnobs.int("LARDER_LOST_UPDATE_CLIENTS", default: 50)
            * ReliabilityKnobs.int("LARDER_LOST_UPDATE_INCREMENTS", default: 100) / 500))
struct ReliabilityLostUpdateTests {
    static let clients = ReliabilityKnobs.int("LARDER_LOST_UPDATE_CLIENTS", default: 50)
    static let increments = ReliabilityKnobs.int("LARDER_LOST_UPDATE_INCREMENTS", default: 100)

    /// One client's increments: read, add 1, write with the revision read; on CONFLICT read again.
    static func increment(_ client: LarderClient, id: UUID, times: Int, conflicts: SharedCounter) async throws {
        var done = 0
        var attempt = 0
        while done < times {
            let record = try await client.get("counters", id: id)
            let value = try #require(record.data["n"]?.intValue)
            let failure: LarderError?
            do throws(LarderError) {
                _ = try await client.patch("counters", id: id, patch: ["n": .int(value + 1)], rev: record.rev)
                failure = nil
            } catch {
                failure = error
            }
            guard let failure else {
                done += 1
                attempt = 0
                continue
            }
            guard failure.status == .conflict else { throw failure }
            conflicts.add(1)
            #expect(failure.details["currentRev"]?.intValue.map { $0 > record.rev } == true)
            // Jittered backoff over a window that grows with the writers: retrying at once would mostly conflict.
            attempt += 1
            let window = ReliabilityKnobs.int("LARDER_LOST_UPDATE_BACKOFF_US", default: 800) * clients
            try await Task.sleep(for: .microseconds(Int.random(in: 0...(window << min(attempt - 1, 2)))))
        }
    }

    static func run() async throws {
        // A child process, so 50 clients' worth of server work does not crowd the other tests' servers out of this
        // process's dispatch threads.
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("larder-counter-\(UUID().wireString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let server = try ServerChild(dataDirectory: root.appendingPathComponent("data").path)
        defer { _ = server.stop() }
        let setup = LarderClient(port: server.port)
        defer { setup.close() }
        let id = try await setup.create("counters", ["n": 0, "note": "incremented by many"]).id
        let conflicts = SharedCounter()
        let started = monotonicSeconds()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                let client = LarderClient(port: server.port)
                group.addTask {
                    defer { client.close() }
                    try await increment(client, id: id, times: increments, conflicts: conflicts)
                }
            }
            try await group.waitForAll()
        }
        let final = try await setup.get("counters", id: id)
        #expect(final.data["n"]?.intValue == Int64(clients * increments))
        #expect(final.rev == Int64(clients * increments + 1))
        #expect(final.data["note"] == "incremented by many")
        #expect(conflicts.value > 0, "the writers never raced, so the retry path went untested")
        report(
            "lost-updates: \(clients) clients x \(increments) increments = "
                + "\(final.data["n"]?.intValue ?? -1) in \(String(format: "%.1f", monotonicSeconds() - started)) s, "
                + "\(conflicts.value) CONFLICTs retried")
    }

    @Test func fiftyClientsTimesAHundredPatchesMakeExactlyFiveThousand() async throws {
        try await Self.run()
    }
}
