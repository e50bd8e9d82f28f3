import LarderTestThreads
import LarderWire
import Synchronization
import Testing

@testable import LarderServer

/// A HELLO that presents a session: the session is kept in the store, so the state machine hands its lookup to the
/// shell (to run off the event loop) and holds everything after the HELLO until the answer.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct HelloSessionTests {
    typealias Machine = ConnectionStateMachine
    typealias Tests = ConnectionStateMachineTests

    /// Counts the lookups made through the protocol: the machine itself must make none.
    final class Sessions: SessionSignIn {
        let lookups = Atomic<Int>(0)
        func user(ofSession text: String) throws(LarderError) -> SessionSignIn.Found {
            lookups.add(1, ordering: .relaxed)
            return ("larder|someone", [1], 4_102_444_800_000)
        }
    }

    static func machine(_ sessions: Sessions) -> Machine {
        var configuration = Machine.Configuration()
        configuration.accounts = sessions
        return Machine(configuration: configuration, now: 0)
    }

    static let helloWithSession: [UInt8] = {
        var request = HelloRequest(client: "test")
        request.session = "a-session"
        return Tests.frameBytes(.hello, id: 1, json: request.json)
    }()

    @Test func theLookupLeavesTheLoopAndARequestSentBehindTheHelloWaitsForIt() throws {
        let sessions = Sessions()
        var machine = Self.machine(sessions)
        let actions = Tests.feed(&machine, Self.helloWithSession + Tests.frameBytes(.ping, id: 2))
        #expect(actions.contains(.lookUpSession("a-session")))
        #expect(actions.contains(.pauseReading))
        #expect(Tests.executed(actions).isEmpty, "the PING behind the HELLO waits for the session's answer")
        #expect(machine.unsentBytes == 0 && !machine.isHandshakeDone)
        #expect(sessions.lookups.load(ordering: .relaxed) == 0, "the machine does not read the store")

        // However long the store takes, a connection waiting for it is not idle.
        #expect(machine.timerFired(now: 10 * UInt64(Limits.default.idleTimeoutMs)).isEmpty)

        var next: [Machine.Action] = []
        machine.sessionLookedUp(.success(("larder|someone", [7, 7], 4_102_444_800_000)), now: 1, into: &next)
        #expect(next.contains(.record(.hello, .ok, requestID: 1)))
        #expect(next.contains(.resumeReading))
        #expect(Tests.executed(next).map(\.requestID) == [2])
        #expect(machine.user == "larder|someone" && machine.session == [7, 7])
        let (frames, _) = Tests.drain(&machine)
        let hello = try HelloResponse(json: frames[0].jsonObject())
        #expect(hello.user == SignedInUser(id: "larder|someone", sessionExpiresAt: 4_102_444_800_000))
    }

    @Test func aSessionNotInForceIsRefusedAndNothingBehindItRuns() throws {
        var machine = Self.machine(Sessions())
        _ = Tests.feed(&machine, Self.helloWithSession + Tests.frameBytes(.ping, id: 2))
        var next: [Machine.Action] = []
        let ended = LarderError(.unauthenticated, "the session has ended; sign in again", field: "session")
        machine.sessionLookedUp(.failure(ended), now: 1, into: &next)
        #expect(Tests.executed(next).isEmpty)
        let (frames, drained) = Tests.drain(&machine)
        #expect(frames.map(\.status) == [.unauthenticated])
        #expect(Tests.closeReason(next + drained) == .protocolError(.unauthenticated))
    }

    @Test func anAnswerAfterTheConnectionClosedIsDropped() {
        var machine = Self.machine(Sessions())
        _ = Tests.feed(&machine, Self.helloWithSession)
        #expect(machine.forceClose(.shutdown) == [.close(.shutdown)])
        var next: [Machine.Action] = []
        machine.sessionLookedUp(.success(("larder|someone", [1], 4_102_444_800_000)), now: 1, into: &next)
        #expect(next.isEmpty && machine.unsentBytes == 0)
    }
}
