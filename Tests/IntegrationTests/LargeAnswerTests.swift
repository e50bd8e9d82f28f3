import Foundation
import Glibc
import LarderServer
import LarderWire
import Testing

/// Answers of `Connection.offloadBytes` or more (photos) are written by a sender thread while the connection's loop
/// goes on; the stream must stay exactly what the loop alone would have written, whatever the client does meanwhile.
@Suite struct LargeAnswerTests {
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

    @Test func largeAnswersBetweenSmallOnesArriveWholeAndInStep() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
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
            while seen < expected.count {
                guard let frame = try c.receive(timeout: 20) else { throw ServerTestError("closed after \(seen) answers") }
                #expect(frame.status == .ok)
                guard let want = expected[frame.requestID] else { throw ServerTestError("unexpected id \(frame.requestID)") }
                if let photo = want {
                    let whole = frame.binary == photo  // not in #expect: a failure would print megabytes
                    #expect(whole, "answer \(frame.requestID): \(frame.binary.count) bytes, \(photo.count) expected")
                }
                seen += 1
            }
        }
    }

    @Test func aReaderThatPausesGetsEveryAnswerWhenItReadsAgain() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            let photo = try Self.largeJPEG(1_500_000)
            let id = try Self.put(c, photo)
            let sent = try (0..<12).map { _ in try c.send(.blobGet, ["id": .string(id)]) }
            usleep(400_000)  // 18 MB asked for, nothing read: the socket fills and the sender hands back to the loop
            let other = try RawClient.tcp(port: port)  // meanwhile the loop serves others
            try other.hello()
            #expect(try other.call(.ping).status == .ok)
            var received: [UInt32] = []
            for _ in sent {
                guard let frame = try c.receive(timeout: 20) else { throw ServerTestError("closed") }
                let whole = frame.binary == photo
                #expect(frame.status == .ok && whole, "answer \(frame.requestID): \(frame.binary.count) bytes")
                received.append(frame.requestID)
            }
            #expect(Set(received) == Set(sent))
        }
    }

    @Test func clientsThatLeaveMidAnswerLeaveNothingBehind() throws {
        try withServerOnPort0 { server, port in
            let setup = try RawClient.tcp(port: port)
            try setup.hello()
            let photo = try Self.largeJPEG(2_000_000)
            let id = try Self.put(setup, photo)
            func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
            let before = descriptors()
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
            let deadline = Date().addingTimeInterval(10)
            while (server.openConnections > 1 || descriptors() > before) && Date() < deadline { usleep(20_000) }
            #expect(server.openConnections == 1)
            #expect(descriptors() <= before, "descriptors \(before) -> \(descriptors())")
            let reply = try setup.call(.blobGet, ["id": .string(id)])
            let whole = reply.binary == photo
            #expect(reply.status == .ok && whole)
        }
    }
}
