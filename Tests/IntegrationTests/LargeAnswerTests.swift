import Foundation
import Glibc
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Answers of `ServerConnection.offloadBytes` or more (photos) are written by a sender thread while the connection's
/// loop goes on; the stream must stay exactly what the loop alone would have written, whatever the client does meanwhile.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct LargeAnswerTests {
    /// A fixture photo grown past the sender threshold with comment segments (still a valid JPEG).
    static func largeJPEG(_ extra: Int) throws -> [UInt8] {
        let photo = try ServerFixtures.data("rocket.jpg")
        var out = Array(photo[0..<2])  // SOI
        var left = extra
        var n: UInt8 = 0
        while left > 0 {
            let size = min(left, 60_000)
            out += [0xFF, 0xFE, UInt8((size + 2) >> 8), UInt8((size + 2) & 0xFF)]
            out += [UInt8](repeating: 0x41 &+ n, count: size)
            left -= size
            n &+= 1
        }
        return out + photo[2...]
    }

    static func put(_ c: RawClient, _ bytes: [UInt8]) throws -> String {
        let reply = try c.call(.blobPut, [:], binary: bytes)
        guard reply.status == .ok, case .string(let id)? = reply.replyJSON["id"] else {
            throw ServerTestError("BLOB_PUT failed: \(reply.replyText)")
        }
        return id
    }

    @Test func largeAnswersBetweenSmallOnesArriveWholeAndOnce() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let photos = [try Self.largeJPEG(300_000), try Self.largeJPEG(1_200_000)]
            let ids = try photos.map { try Self.put(c, $0) }
            var expected: [UInt32: [UInt8]?] = [:]
            for round in 0..<30 {
                expected[try c.send(.blobGet, ["id": .string(ids[round % 2])])] = photos[round % 2]
                expected[try c.send(.ping)] = .some(nil)
                if round % 3 == 0 { expected[try c.send(.blobGet, ["id": .string(ids[(round + 1) % 2])])] = photos[(round + 1) % 2] }
            }
            var seen = 0
            let count = expected.count
            while seen < count {
                guard let frame = try c.receive(timeout: 120) else { throw ServerTestError("closed after \(seen) answers") }
                #expect(frame.status == .ok)
                // Each answer once (removed as it arrives), to the request it answers.
                guard let want = expected.removeValue(forKey: frame.requestID) else {
                    throw ServerTestError("unexpected or repeated id \(frame.requestID)")
                }
                if let photo = want {
                    let whole = frame.binary == photo  // not in #expect: a failure would print megabytes
                    #expect(whole, "answer \(frame.requestID): \(frame.binary.count) bytes, \(photo.count) expected")
                }
                seen += 1
            }
        }
    }

    @Test func aReaderThatPausesGetsEveryAnswerWhenItReadsAgain() throws {
        try withServerWithoutListener({ $0.ioQueues = 1 }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let photo = try Self.largeJPEG(1_500_000)
            let id = try Self.put(c, photo)
            let sent = try (0..<12).map { _ in try c.send(.blobGet, ["id": .string(id)]) }
            usleep(400_000)  // 18 MB asked for, nothing read: the socket fills and the sender hands back to the loop
            let other = try RawClient.connected(to: server)  // meanwhile the (only) loop serves others
            try other.hello()
            #expect(try other.call(.ping).status == .ok)
            var received: [UInt32] = []
            for _ in sent {
                guard let frame = try c.receive(timeout: 120) else { throw ServerTestError("closed") }
                let whole = frame.binary == photo
                #expect(frame.status == .ok && whole, "answer \(frame.requestID): \(frame.binary.count) bytes")
                received.append(frame.requestID)
            }
            #expect(Set(received) == Set(sent))
        }
    }

    /// The server's sockets on `port` in each TCP state (from /proc/net/tcp: this server's alone, whatever other
    /// tests run meanwhile). "01" is ESTABLISHED, "08" CLOSE_WAIT (the peer left, the server has not closed).
    static func serverSockets(port: Int) -> [String: Int] {
        // Read to the end by hand: a /proc file reports size 0, and it is long while other tests hold sockets.
        let fd = open("/proc/net/tcp", O_RDONLY)
        guard fd >= 0 else { return [:] }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        let table = String(decoding: bytes, as: UTF8.self)
        let local = String(format: ":%04X", port)
        var states: [String: Int] = [:]
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 3, fields[1].hasSuffix(local) else { continue }
            states[String(fields[3]), default: 0] += 1
        }
        return states
    }

    @Test func clientsThatLeaveMidAnswerLeaveNothingBehind() throws {
        try withServerOnPort0 { server, port in
            let setup = try RawClient.tcp(port: port)
            try setup.hello()
            let photo = try Self.largeJPEG(2_000_000)
            let id = try Self.put(setup, photo)
            for _ in 0..<3 {
                var leavers: [RawClient] = []
                for _ in 0..<16 {
                    let c = try RawClient.tcp(port: port)
                    try c.hello()
                    for _ in 0..<4 { try c.send(.blobGet, ["id": .string(id)]) }
                    leavers.append(c)
                }
                usleep(50_000)
                leavers.removeAll()  // closed with answers half sent
            }
            // Every connection of a client that left is closed by the server, and the kernel holds none of its
            // sockets open: none established but `setup`'s, none waiting for the server to close (a client that left
            // with unread answers resets its connection, whose socket then leaves the table at once, so the server's
            // own count is waited for as well).
            let deadline = Date().addingTimeInterval(120)
            while (Self.serverSockets(port: port) != ["01": 1, "0A": 1] || server.openConnections > 1)
                && Date() < deadline
            {
                usleep(20_000)
            }
            #expect(Self.serverSockets(port: port) == ["01": 1, "0A": 1])  // 0A: the listening socket
            #expect(server.openConnections == 1)
            let reply = try setup.call(.blobGet, ["id": .string(id)])
            let whole = reply.binary == photo
            #expect(reply.status == .ok && whole)
        }
    }

    /// Change events pushed to a subscription while a sender writes a large answer of the same connection queue
    /// behind it: the stream stays whole, the events arrive in order, and what the sender holds does not count
    /// against the subscription's buffer.
    @Test func eventsDuringLargeAnswersArriveWholeAfterThem() throws {
        try withServerWithoutListener({ $0.ioQueues = 1 }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let photo = try Self.largeJPEG(3_000_000)
            let id = try Self.put(c, photo)
            #expect(try c.call(.watch, ["collection": "items"]).status == .ok)
            for _ in 0..<12 { try c.send(.blobGet, ["id": .string(id)]) }
            let writes = 120
            let writerDone = DispatchSemaphore(value: 0)
            let writer = Thread {
                defer { writerDone.signal() }
                guard let w = try? RawClient.connected(to: server), (try? w.hello()) != nil else { return }
                for n in 0..<writes {
                    _ = try? w.call(.create, ["collection": "items", "data": ["n": .int(Int64(n))]])
                }
            }
            writer.start()
            var blobs = 0
            var seqs: [Int64] = []
            var gap = false
            while blobs < 12 || (!gap && seqs.count < writes) {
                guard let frame = try c.receive(timeout: 120) else { throw ServerTestError("closed") }
                if frame.opcode == .event {
                    if case .string("gap")? = frame.replyJSON["kind"] {
                        gap = true
                    } else if case .int(let seq)? = frame.replyJSON["seq"] {
                        seqs.append(seq)
                    }
                } else {
                    let whole = frame.binary == photo
                    #expect(frame.opcode == .blobGet && frame.status == .ok && whole, "\(frame.binary.count) bytes")
                    blobs += 1
                }
            }
            writerDone.wait()
            #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)
            #expect(gap || seqs.count == writes)
            #expect(try c.call(.ping).status == .ok)
        }
    }
}
