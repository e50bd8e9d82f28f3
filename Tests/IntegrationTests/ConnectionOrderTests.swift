import Foundation
import LarderBench
import LarderClient
import LarderServer
import LarderTestThreads
import LarderWire
import Testing
import LarderIO
import LarderTestSupport

/// One connection's order through a real server (Protocol.md section 2.3): its requests take effect as if run one at
/// a time in the order sent, however they are pipelined; only their answers may come in another order.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ConnectionOrderTests {
    static func uuid() -> String { UUID().wireString }

    /// CREATE X {"v":0}, PATCH X {"v":1}, PATCH X {"v":2}, GET X, sent in one write: the GET sees {"v":2} at rev 3.
    @Test func aGetPipelinedAfterWritesSeesThem() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            for _ in 0..<50 {
                let x = Self.uuid()
                let target: JSONObject = ["collection": "todos", "id": .string(x)]
                var create = target
                create["data"] = ["v": 0]
                var patch1 = target
                patch1["patch"] = ["v": 1]
                var patch2 = target
                patch2["patch"] = ["v": 2]
                let stream =
                    c.encode(.create, create, id: 1) + c.encode(.patch, patch1, id: 2) + c.encode(.patch, patch2, id: 3)
                    + c.encode(.get, target, id: 4)
                try c.writeAll(stream)
                var answers: [UInt32: Frame] = [:]
                while answers.count < 4, let frame = try c.receive(timeout: 120) { answers[frame.requestID] = frame }
                try #require(answers.count == 4)
                #expect(answers.values.allSatisfy { $0.status == .ok }, "\(answers.values.map(\.replyText))")
                #expect(answers[1]?.replyJSON["rev"] == 1)
                #expect(answers[2]?.replyJSON["rev"] == 2)
                #expect(answers[3]?.replyJSON["rev"] == 3)
                #expect(answers[4]?.replyJSON["rev"] == 3)
                #expect(answers[4]?.replyJSON["data"] == ["v": 2])
                let final = try c.call(.get, target)
                #expect(final.replyJSON["data"] == ["v": 2])
            }
        }
    }

    /// 40 PATCHes of one document sent at once commit in send order: the i-th is answered with revision i + 1.
    @Test func pipelinedPatchesCommitInSendOrder() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            for _ in 0..<5 {
                let x = Self.uuid()
                let target: JSONObject = ["collection": "todos", "id": .string(x)]
                var create = target
                create["data"] = ["n": -1]
                #expect(try c.call(.create, create).status == .ok)
                var stream: [UInt8] = []
                for n in 0..<40 {
                    var patch = target
                    patch["patch"] = ["n": .int(Int64(n))]
                    stream += c.encode(.patch, patch, id: UInt32(100 + n))
                }
                try c.writeAll(stream)
                var revisions: [UInt32: JSON] = [:]
                while revisions.count < 40, let frame = try c.receive(timeout: 120) {
                    #expect(frame.status == .ok)
                    revisions[frame.requestID] = frame.replyJSON["rev"]
                }
                for n in 0..<40 { #expect(revisions[UInt32(100 + n)] == .int(Int64(n + 2)), "PATCH \(n)") }
                #expect(try c.call(.get, target).replyJSON["data"] == ["n": 39])
            }
        }
    }

    /// Small writes are parsed on the event loop and go straight to the writer, large ones through the work pool: a
    /// small write sent after a large one still commits after it. A large CREATE X, a small PATCH X, a large REPLACE
    /// X, a small PATCH X, sent in one write, answer revisions 1 to 4, and X ends as the last PATCH left it.
    @Test func smallWritesSentAfterALargeOneCommitAfterIt() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            // Over the size parsed on the loop (`RequestPlan.loopWriteBytes`, 4 KiB).
            let large = String(repeating: "x", count: 6000)
            for _ in 0..<40 {
                let x = Self.uuid()
                let target: JSONObject = ["collection": "todos", "id": .string(x)]
                var create = target
                create["data"] = ["text": .string(large), "step": 1]
                var patch1 = target
                patch1["patch"] = ["step": 2]
                var replace = target
                replace["data"] = ["text": .string(large + "y"), "step": 3]
                var patch2 = target
                patch2["patch"] = ["step": 4, "text": .null]
                let stream =
                    c.encode(.create, create, id: 1) + c.encode(.patch, patch1, id: 2) + c.encode(.replace, replace, id: 3)
                    + c.encode(.patch, patch2, id: 4)
                try c.writeAll(stream)
                var answers: [UInt32: Frame] = [:]
                while answers.count < 4, let frame = try c.receive(timeout: 120) { answers[frame.requestID] = frame }
                try #require(answers.count == 4)
                #expect(answers.values.allSatisfy { $0.status == .ok }, "\(answers.values.map(\.replyText))")
                for n in 1...4 { #expect(answers[UInt32(n)]?.replyJSON["rev"] == .int(Int64(n)), "request \(n)") }
                #expect(try c.call(.get, target).replyJSON["data"] == ["step": 4])
            }
        }
    }

    /// A BLOB_HEAD or BLOB_GET sent after a BLOB_PUT finds the blob; one sent after the DELETE of the document it was
    /// attached to does not.
    @Test func blobReadsObserveEarlierWrites() throws {
        let jpeg = try ServerFixtures.data("rocket.jpg")
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            for _ in 0..<20 {
                let x = Self.uuid()
                let blob = Self.uuid()
                let target: JSONObject = ["collection": "items", "id": .string(x)]
                var create = target
                create["data"] = ["name": "rocket"]
                let put: JSONObject = ["id": .string(blob), "attach": .object(target)]
                let byID: JSONObject = ["id": .string(blob)]
                let stream =
                    c.encode(.create, create, id: 1) + c.encode(.blobPut, put, binary: jpeg, id: 2)
                    + c.encode(.blobHead, byID, id: 3) + c.encode(.blobGet, byID, id: 4)
                    + c.encode(.delete, target, id: 5) + c.encode(.blobHead, byID, id: 6)
                try c.writeAll(stream)
                var answers: [UInt32: Frame] = [:]
                while answers.count < 6, let frame = try c.receive(timeout: 120) { answers[frame.requestID] = frame }
                #expect((1...5).map { answers[$0]?.status } == Array(repeating: .ok, count: 5))
                #expect(answers[4]?.binary == jpeg, "BLOB_GET answers the photo")
                #expect(answers[5]?.replyJSON["blobsDeleted"] == 1)
                #expect(answers[6]?.status == .notFound)
            }
        }
    }

    /// A WATCH sent after a write starts after it: its `seq` covers the write, so the write is not sent as an event.
    @Test func aWatchAfterAWriteStartsPastIt() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            for round in 0..<30 {
                let create: JSONObject = ["collection": "todos", "data": ["round": .int(Int64(round))]]
                let stream = c.encode(.create, create, id: 1) + c.encode(.watch, ["collection": "todos"], id: 2)
                try c.writeAll(stream)
                var answers: [UInt32: Frame] = [:]
                while answers.count < 2, let frame = try c.receive(timeout: 120) {
                    #expect(!frame.isPush, "no event: the create came before the subscription")
                    answers[frame.requestID] = frame
                }
                let watch = try WatchResponse(json: try #require(answers[2]).jsonObject())
                #expect(watch.seq == Int64(round + 1), "the subscription starts after the create")
                let unwatch = try c.call(.unwatch, ["subscription": .int(Int64(watch.subscription))])
                #expect(unwatch.status == .ok)
            }
        }
    }

    /// Random mixes of writes and reads of a few documents, pipelined on one raw connection, against a sequential
    /// model: every answer is exactly what the model gives after the requests sent before it.
    @Test func randomPipelinesMatchASequentialModelOverTheWire() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            var rng = SplitMix64(seed: 0x5EED_0012)
            for round in 0..<1000 {
                let script = OrderScript(round: round, rng: &rng)
                var stream: [UInt8] = []
                for (n, step) in script.steps.enumerated() {
                    stream += c.encode(step.opcode, step.json, id: UInt32(n + 1))
                }
                try c.writeAll(stream)
                var answers: [Answer?] = Array(repeating: nil, count: script.steps.count)
                var received = 0
                while received < script.steps.count, let frame = try c.receive(timeout: 120) {
                    let index = Int(frame.requestID) - 1
                    try #require(answers.indices.contains(index) && answers[index] == nil)
                    answers[index] = Answer(status: frame.status, json: frame.status == .ok ? frame.replyJSON : .null)
                    received += 1
                }
                try #require(received == script.steps.count)
                script.check(answers.map { $0! }, round: round)
            }
        }
    }

    /// The same through `LarderClient` on its one connection: each call is started with `Task.immediate`, which
    /// sends the request before it returns, so the requests are in flight together in the order of the script.
    @Test func randomPipelinesMatchASequentialModelThroughTheClient() async throws {
        let directory = temporaryTestDirectory("larder-order")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.ioQueues = 2
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let client = LarderClient(host: "127.0.0.1", port: port)
        defer { client.close() }
        try await client.connect()
        var rng = SplitMix64(seed: 0x5EED_0013)
        for round in 0..<1000 {
            let script = OrderScript(round: round, rng: &rng)
            var tasks: [Task<Answer, Never>] = []
            for step in script.steps {
                tasks.append(
                    Task.immediate {
                        do throws(LarderError) {
                            let reply = try await client.request(step.opcode, json: step.json)
                            return Answer(status: .ok, json: .object(reply.json))
                        } catch {
                            return Answer(status: error.status, json: .null)
                        }
                    })
            }
            var answers: [Answer] = []
            for task in tasks { answers.append(await task.value) }
            script.check(answers, round: round)
        }
    }
}

/// A request's outcome: its status, and the answer's JSON when it succeeded.
struct Answer: Sendable, Equatable, CustomStringConvertible {
    var status: Status
    var json: JSON

    var description: String {
        var text: [UInt8] = []
        json.write(into: &text)
        return "\(status.name) \(String(decoding: text, as: UTF8.self))"
    }
}

/// A random pipeline of writes and reads on three documents of a fresh collection, with what a sequential server
/// would answer.
struct OrderScript {
    struct Step: Sendable {
        var opcode: Opcode
        var json: JSONObject
    }

    /// The collection as a sequential server holds it after some prefix of the writes: each document with its
    /// revision, data and place in creation order (the order LIST answers in).
    struct State {
        var documents: [String: (rev: Int64, data: JSONObject, created: Int)] = [:]
        var creations = 0

        subscript(id: String) -> (rev: Int64, data: JSONObject, created: Int)? {
            get { documents[id] }
            set { documents[id] = newValue }
        }
    }

    let collection: String
    let ids: [String]
    var steps: [Step] = []
    /// For each step, how many writes come before it.
    var writesBefore: [Int] = []
    /// `states[k]`: the collection after the first k writes.
    var states: [State] = [State()]

    init(round: Int, rng: inout SplitMix64) {
        collection = "order\(round)"
        // Sorted, so that the expected id order of LIST and of sort ties is the array's.
        ids = (0..<3).map { _ in UUID().wireString }.sorted()
        for _ in 0..<(4 + Int(rng.next() % 13)) { add(random(&rng)) }
    }

    private var state: State { states[states.count - 1] }

    private func random(_ rng: inout SplitMix64) -> Step {
        let id = ids[Int(rng.next() % UInt64(ids.count))]
        let v = JSON.int(Int64(rng.next() % 4))
        var target: JSONObject = ["collection": .string(collection), "id": .string(id)]
        // An expected revision: none, the current one, or a stale one.
        let current = state[id]?.rev ?? 1
        switch rng.next() % 3 {
        case 0: target["rev"] = .int(current)
        case 1: target["rev"] = .int(current + 1)
        default: break
        }
        let scoped: JSONObject = ["collection": .string(collection)]
        switch rng.next() % 12 {
        case 0, 1:
            return Step(opcode: .create, json: ["collection": .string(collection), "id": .string(id), "data": ["v": v]])
        case 2:
            target["data"] = ["v": v, "r": true]
            return Step(opcode: .replace, json: target)
        case 3, 4:
            target["patch"] = rng.next() % 2 == 0 ? ["v": v] : ["w": rng.next() % 2 == 0 ? .null : v]
            return Step(opcode: .patch, json: target)
        case 5:
            return Step(opcode: .delete, json: target)
        case 6, 7:
            return Step(opcode: .get, json: ["collection": .string(collection), "id": .string(id)])
        case 8:
            return Step(opcode: .getMany, json: ["collection": .string(collection), "ids": .array(ids.map { .string($0) })])
        case 9:
            var search = scoped
            search["sort"] = [["field": "v", "order": "desc"]]
            return Step(opcode: .search, json: search)
        case 10:
            return Step(opcode: rng.next() % 2 == 0 ? .count : .list, json: scoped)
        default:
            var group = scoped
            group["field"] = "v"
            return Step(opcode: .group, json: group)
        }
    }

    private mutating func add(_ step: Step) {
        writesBefore.append(states.count - 1)
        steps.append(step)
        if step.opcode.isWrite {
            var next = state
            _ = Self.apply(step, to: &next)
            states.append(next)
        }
    }

    /// Applies a write to `state` as the server would; returns its status.
    static func apply(_ step: Step, to state: inout State) -> Status {
        let json = step.json
        guard case .string(let id)? = json["id"] else { return .invalidArgument }
        let expected: Int64? = if case .int(let rev)? = json["rev"] { rev } else { nil }
        let existing = state[id]
        if step.opcode == .create {
            guard existing == nil, case .object(let data)? = json["data"] else { return .conflict }
            state.creations += 1
            state[id] = (1, data, state.creations)
            return .ok
        }
        guard let existing else { return .notFound }
        if let expected, expected != existing.rev { return .conflict }
        switch step.opcode {
        case .replace:
            guard case .object(let data)? = json["data"] else { return .invalidArgument }
            state[id] = (existing.rev + 1, data, existing.created)
        case .patch:
            guard case .object(let patch)? = json["patch"] else { return .invalidArgument }
            var data = existing.data
            for key in patch.keys {
                if patch[key] == .null { data[key] = nil } else { data[key] = patch[key] }
            }
            state[id] = (existing.rev + 1, data, existing.created)
        case .delete:
            state[id] = nil
        default:
            return .invalidArgument
        }
        return .ok
    }

    /// A record as `reduce` leaves it: id, revision and data.
    static func record(_ id: String, in state: State) -> JSON {
        guard let document = state[id] else { return .null }
        return ["id": .string(id), "rev": .int(document.rev), "data": .object(document.data)]
    }

    /// What `step` answers on `state`, reduced to what a check compares (timestamps left out).
    func expected(_ step: Step, on state: State) -> Answer {
        if step.opcode.isWrite {
            var after = state
            let status = Self.apply(step, to: &after)
            let id = step.json["id"]?.stringValue ?? ""
            return Answer(status: status, json: status == .ok ? Self.record(id, in: after) : .null)
        }
        func page(_ ordered: [String]) -> JSON { .array(ordered.map { Self.record($0, in: state) }) }
        let present = ids.filter { state[$0] != nil }
        switch step.opcode {
        case .get:
            let id = step.json["id"]?.stringValue ?? ""
            return state[id] == nil ? Answer(status: .notFound, json: .null) : Answer(status: .ok, json: Self.record(id, in: state))
        case .getMany:
            let missing = ids.filter { state[$0] == nil }.map { JSON.string($0) }
            return Answer(status: .ok, json: ["records": page(present), "missing": .array(missing)])
        case .list:
            return Answer(status: .ok, json: page(present.sorted { state[$0]!.created < state[$1]!.created }))
        case .search:
            // By v descending (a missing v sorts first ascending, so last here), ties by id ascending.
            let key = { (id: String) -> Int64 in state[id]?.data["v"]?.intValue ?? -1 }
            let sorted = present.enumerated().sorted { a, b in
                key(a.element) != key(b.element) ? key(a.element) > key(b.element) : a.offset < b.offset
            }
            return Answer(status: .ok, json: page(sorted.map(\.element)))
        case .count:
            return Answer(status: .ok, json: ["count": .int(Int64(present.count))])
        default:  // GROUP by v
            var counts: [Int64: Int64] = [:]
            for id in present { if let v = state[id]?.data["v"]?.intValue { counts[v, default: 0] += 1 } }
            let groups = counts.keys.sorted().map { JSON.object(["key": .int($0), "count": .int(counts[$0]!)]) }
            return Answer(status: .ok, json: .array(groups))
        }
    }

    /// The server's answer reduced to the same form as `expected`.
    static func reduce(_ opcode: Opcode, _ answer: Answer) -> Answer {
        guard answer.status == .ok else { return Answer(status: answer.status, json: .null) }
        func record(_ json: JSON?) -> JSON {
            guard let json else { return .null }
            return ["id": json["id"] ?? .null, "rev": json["rev"] ?? .null, "data": json["data"] ?? .null]
        }
        let json = answer.json
        switch opcode {
        case .getMany:
            return Answer(
                status: .ok,
                json: ["records": .array((json["records"]?.arrayValue ?? []).map(record)), "missing": json["missing"] ?? .null])
        case .list, .search:
            return Answer(status: .ok, json: .array((json["records"]?.arrayValue ?? []).map(record)))
        case .count:
            return Answer(status: .ok, json: ["count": json["count"] ?? .null])
        case .group:
            let groups = (json["groups"]?.arrayValue ?? []).map { JSON.object(["key": $0["key"] ?? .null, "count": $0["count"] ?? .null]) }
            return Answer(status: .ok, json: .array(groups))
        case .delete:
            return Answer(status: .ok, json: .null)
        default:
            return Answer(status: .ok, json: record(json))
        }
    }

    /// Checks every answer against the model after the writes sent before it.
    func check(_ answers: [Answer], round: Int) {
        for (n, step) in steps.enumerated() {
            let got = Self.reduce(step.opcode, answers[n])
            let want = expected(step, on: states[writesBefore[n]])
            #expect(got == want, "round \(round), step \(n) of \(steps.count): \(step.opcode.name)")
        }
    }
}
