#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderWire
import Testing

/// Answers checked against Protocol.md through a real server socket (issue 12): each test names the rule it holds
/// the server to, and fails on the answer the server gave before.
@Suite struct ProtocolConformanceTests {
    /// Section 4: PING's JSON part is empty in both directions, before HELLO and after it.
    @Test func pingAnswersAnEmptyJSONPart() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            let before = try c.call(.ping)
            #expect(before.status == .ok && before.json.isEmpty, "\(before.replyText)")
            try c.hello(compression: [])
            let after = try c.call(.ping)
            #expect(after.status == .ok && after.json.isEmpty, "\(after.replyText)")
        }
    }

    /// Sends `json` as written (so the server's tree-free readers see it as a client wrote it) and returns the answer.
    static func raw(_ c: RawClient, _ opcode: Opcode, _ json: String, binary: [UInt8] = []) throws -> Frame {
        try c.writeAll(HostileFrames.request(opcode, json, binary: binary))
        guard let frame = try c.receive() else { throw ServerTestError("closed awaiting \(opcode.name)") }
        return frame
    }

    /// The error object of an error answer.
    static func error(_ frame: Frame) -> JSONObject { frame.replyJSON.objectValue ?? [:] }

    /// Section 5.5: `field` is the request member at fault, so a stale revision names `rev` (it named `expectedRev`,
    /// which no request has) on every write that takes one, through the tree-free CREATE/REPLACE reader as well.
    @Test func aStaleRevisionNamesRev() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello(compression: [])
            let id = try Record(json: c.call(.create, ["collection": "items", "data": ["n": 1]]).jsonObject()).id
            let replace = #"{"collection":"items","id":"\#(id.wireString)","data":{"n":2},"rev":7}"#
            let patch = #"{"collection":"items","id":"\#(id.wireString)","patch":{"n":2},"rev":7}"#
            let delete = #"{"collection":"items","id":"\#(id.wireString)","rev":7}"#
            // The same REPLACE with a space: the general reader (the tree-free one takes only the plain form).
            let spaced = #"{"collection": "items", "id": "\#(id.wireString)", "data": {"n": 2}, "rev": 7}"#
            for (opcode, json) in [(Opcode.replace, replace), (.replace, spaced), (.patch, patch), (.delete, delete)] {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .conflict, "\(opcode.name): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == "rev", "\(opcode.name): \(answer.replyText)")
                #expect(Self.error(answer)["currentRev"] == 1, "\(opcode.name): \(answer.replyText)")
            }
        }
    }

    /// Sections 5.5 and 6: PAYLOAD_TOO_LARGE carries `limit` for a document over `maxDocumentBytes` (CREATE on both
    /// readers, REPLACE, a PATCH whose result is over it) and names the member the document came from; the
    /// connection stays open. A blob over `maxBlobBytes` is refused at the header, with `limit`, and closes.
    @Test func aDocumentOverTheLimitCarriesTheLimit() throws {
        let limit = 1000
        try withServerOnPort0({ $0.limits.maxDocumentBytes = limit; $0.limits.maxBlobBytes = 4096 }) { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello(compression: [])
            let half = String(repeating: "h", count: 600)
            let id = try Record(json: c.call(.create, ["collection": "items", "data": ["a": .string(half)]]).jsonObject())
                .id.wireString
            let big = String(repeating: "b", count: 1200)
            let cases: [(String, Opcode, String, String)] = [
                ("CREATE", .create, #"{"collection":"items","data":{"a":"\#(big)"}}"#, "data"),
                ("CREATE, general reader", .create, #"{"collection": "items", "data": {"a": "\#(big)"}}"#, "data"),
                ("REPLACE", .replace, #"{"collection":"items","id":"\#(id)","data":{"a":"\#(big)"}}"#, "data"),
                ("PATCH", .patch, #"{"collection":"items","id":"\#(id)","patch":{"b":"\#(half)"}}"#, "patch"),
            ]
            for (name, opcode, json, field) in cases {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .payloadTooLarge, "\(name): \(answer.replyText)")
                #expect(Self.error(answer)["limit"] == .int(Int64(limit)), "\(name): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == .string(field), "\(name): \(answer.replyText)")
            }
            #expect(try c.call(.ping).status == .ok)

            let blob = try RawClient.tcp(port: port)
            try blob.hello(compression: [])
            try blob.writeAll(HostileFrames.request(.blobPut, "{}", binary: Array(repeating: 0xFF, count: 5000)))
            let frames = try blob.framesUntilClosed()
            #expect(frames.map(\.status) == [.payloadTooLarge])
            #expect(frames.first.flatMap { Self.error($0)["limit"] } == .int(4096))
        }
    }

    /// Section 5.4: errors about `attach` name its members as `attach.…` (a bad collection named
    /// `attachTo.collection`, a missing document `attachTo`).
    @Test func blobPutErrorsNameAttach() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello(compression: [])
            let jpeg = try ServerFixtures.data("rocket.jpg")
            let badName = try c.call(.blobPut, ["attach": ["collection": "9 bad", "id": .string(UUID().wireString)]],
                binary: jpeg)
            #expect(badName.status == .invalidArgument)
            #expect(Self.error(badName)["field"] == "attach.collection", "\(badName.replyText)")
            let missing = try c.call(.blobPut, ["attach": ["collection": "items", "id": .string(UUID().wireString)]],
                binary: jpeg)
            #expect(missing.status == .notFound)
            #expect(Self.error(missing)["field"] == "attach.id", "\(missing.replyText)")
            let extra = try c.call(.blobPut, ["attach": ["collection": "items", "id": .string(UUID().wireString),
                "extra": 1]], binary: jpeg)
            #expect(Self.error(extra)["field"] == "attach.extra", "\(extra.replyText)")
        }
    }
}
