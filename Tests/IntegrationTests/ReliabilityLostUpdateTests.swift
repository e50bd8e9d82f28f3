import Foundation
import LarderClient
import LarderWire
import Testing

/// No lost updates (issue 7): many clients add 1 to one counter with revision-checked writes, retrying on CONFLICT;
/// the final value is exactly the number of increments, and the revision says no write was applied twice.
@Suite struct ReliabilityLostUpdateTests {
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
            // Jittered exponential backoff: 50 writers retrying at once would mostly conflict again.
            attempt += 1
            try await Task.sleep(for: .microseconds(Int.random(in: 0...(250 << min(attempt, 6)))))
        }
    }

    static func run() async throws {
        let server = try ClientTestServer { $0.ioQueues = 2 }
        defer { server.stop() }
        let setup = server.client()
        defer { setup.close() }
        let id = try await setup.create("counters", ["n": 0, "note": "incremented by many"]).id
        let conflicts = SharedCounter()
        let started = monotonicSeconds()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                let client = server.client()
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
        report(
            "lost-updates: \(clients) clients x \(increments) increments = "
                + "\(final.data["n"]?.intValue ?? -1) in \(String(format: "%.1f", monotonicSeconds() - started)) s, "
                + "\(conflicts.value) CONFLICTs retried")
    }

    @Test func fiftyClientsTimesAHundredPatchesMakeExactlyFiveThousand() async throws {
        try await Self.run()
    }
}
