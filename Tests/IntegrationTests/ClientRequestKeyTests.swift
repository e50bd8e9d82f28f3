import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// The client's retries of writes with request keys (Protocol.md section 5.10) against real servers of both stores,
/// behind a `FaultRelay` that loses answers.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct ClientRequestKeyTests {
    /// The client behind a relay that drops the answer of every other write (and cuts its connection, as a network
    /// that fails with the answer on its way): it sends each such write again, with its key, on a new connection, and
    /// every one of 100 creates and patches is applied exactly once. Then with every write's first answer lost.
    @Test(arguments: RequestKeyTests.Backend.allCases) func theClientAppliesEveryWriteOnceWhenHalfTheAnswersAreLost(
        _ backend: RequestKeyTests.Backend
    ) async throws {
        try await RequestKeyTests.withServer(backend) { port in
            let relay = try FaultRelay(upstreamPort: port)
            defer { relay.stop() }
            let direct = LarderClient(host: "127.0.0.1", port: port)
            let target = try await direct.create("notes", ["n": 0])
            var configuration = LarderClient.Configuration(requestTimeout: .seconds(120), connectTimeout: .seconds(120))
            configuration.endpoints = [.tcp(host: "127.0.0.1", port: relay.port)]
            let client = LarderClient(configuration: configuration)
            #expect(try await client.serverHello().limits.requestKeyRetentionMs != nil)
            // The answer of every other write is lost: a lost answer's retry is the next answer the relay sees, so
            // one answer in three (the first, the fourth...) is dropped, with its connection.
            relay.dropAnswers(.writeAnswers { $0 % 3 == 1 })
            for round in 0..<50 {
                let created = try await client.create("notes", ["round": .int(Int64(round))])
                #expect(created.rev == 1)
                let patched = try await client.patch("notes", id: target.id, patch: ["round": .int(Int64(round))])
                #expect(patched.rev == Int64(round + 2))
            }
            #expect(relay.dropped == 50)
            #expect(relay.connections >= 51, "each lost answer cost its connection")
            #expect(try await direct.count("notes") == 51)
            #expect(try await direct.get("notes", id: target.id).rev == 51)
            let stats = try await direct.stats()
            #expect(stats["store"]?["lastChangeSeq"]?.intValue == 101, "one logged change per write")

            // Each write's first answer lost (each retry's answer is the one after it).
            relay.dropEveryOtherWriteAnswer()
            let before = relay.dropped
            for round in 0..<10 {
                _ = try await client.patch("notes", id: target.id, patch: ["again": .int(Int64(round))])
            }
            #expect(relay.dropped == before + 10)
            #expect(try await direct.get("notes", id: target.id).rev == 61)
        }
    }

    /// The relay's other faults, seen by a client: a blackhole times a request out, a delay holds each answer, a cut
    /// ends the connection (the next call opens another), and a dropped answer without a cut leaves its request
    /// unanswered.
    @Test func theRelayBlackholesDelaysCutsAndDrops() async throws {
        try await RequestKeyTests.withServer(.sqlite) { port in
            let relay = try FaultRelay(upstreamPort: port)
            defer { relay.stop() }
            var configuration = LarderClient.Configuration(requestTimeout: .seconds(120), connectTimeout: .seconds(120))
            configuration.endpoints = [.tcp(host: "127.0.0.1", port: relay.port)]
            let client = LarderClient(configuration: configuration)
            _ = try await client.ping()
            #expect(relay.connections == 1)

            relay.blackhole(true)
            let silent = await #expect(throws: LarderError.self) {
                _ = try await client.request(.ping, timeout: .milliseconds(300))
            }
            #expect(silent?.status == .deadlineExceeded)
            relay.blackhole(false)

            relay.delay(.milliseconds(200))
            #expect(try await client.ping() >= .milliseconds(200))
            relay.delay(.zero)

            relay.cutAll()
            let reconnected = await waitUntil(120) { (try? await client.ping()) != nil && relay.connections >= 2 }
            #expect(reconnected)

            relay.dropNextAnswers(1, thenCut: false)
            let dropped = await #expect(throws: LarderError.self) {
                _ = try await client.request(.ping, timeout: .milliseconds(300))
            }
            #expect(dropped?.status == .deadlineExceeded)
            #expect(relay.dropped == 1)
            _ = try await client.ping()
        }
    }
}
