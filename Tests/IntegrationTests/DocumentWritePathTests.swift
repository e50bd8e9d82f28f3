import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// CREATE and REPLACE in their usual form skip the request's JSON tree (`DocumentWrite.fast`); every other form takes
/// the general parser. Through a real server, both must store the same bytes, find the same text, and answer the same
/// errors.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct DocumentWritePathTests {
    /// Sends `text` as the JSON part of an `opcode` request, as is.
    static func call(_ client: RawClient, _ opcode: Opcode, _ text: String) throws -> Frame {
        try client.writeAll(client.encoder.encode(Frame(opcode: opcode, requestID: 7, json: Array(text.utf8))))
        return try #require(try client.receive())
    }

    @Test func usualAndUnusualFormsStoreTheSameDocument() throws {
        try withServerWithoutListener({ $0.limits.maxDocumentBytes = 200 }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let stored = #"{"title":"買 \"牛奶\"\n2 瓶","price":35.5,"tags":["Dairy","早餐"],"n":-0}"#
            let written = #"{"title":"買 \"牛奶\"\n2 瓶","price":35.5,"tags":["Dairy","早餐"],"n":0}"#
            // The fast path's form (whitespace and escapes in the document), then forms only the general path reads:
            // an escape in the collection name, a null id.
            let forms = [
                #"{"collection":"shop","data":{ "title" : "買 \"牛奶\"\u000a2 \u74f6", "price":35.50, "tags":["Dairy","早餐"],"n":-0 }}"#,
                #"{"collection":"s\u0068op","data":\#(stored)}"#,
                #"{"collection":"shop","id":null,"data":\#(stored)}"#,
            ]
            var ids: [String] = []
            for form in forms {
                let created = try Self.call(c, .create, form)
                #expect(created.status == .ok, "\(created.replyText)")
                let record = try #require(created.replyJSON.objectValue)
                #expect(Array(record["data"]!.bytes) == Array(written.utf8), "\(form)")
                ids.append(try #require(record["id"]?.stringValue))
            }
            for id in ids {
                let got = try c.call(.get, ["collection": "shop", "id": .string(id)])
                #expect(got.replyText.contains(#""data":\#(written)"#), "\(got.replyText)")
            }
            // Substring search finds the decoded text (the escape "\u74f6" is 瓶, "\n" a newline).
            let found = try c.call(.count, ["collection": "shop", "text": ["query": "2 瓶"]])
            #expect(found.replyJSON.objectValue?["count"] == .int(3), "\(found.replyText)")
            let dairy = try c.call(.count, ["collection": "shop", "text": ["query": "dairy"]])
            #expect(dairy.replyJSON.objectValue?["count"] == .int(3), "\(dairy.replyText)")

            // REPLACE with a revision, then the same revision again: a conflict, with the current revision.
            let replace = #"{"collection":"shop","id":"\#(ids[0])","rev":1,"data":{"title":"牛奶"}}"#
            let replaced = try Self.call(c, .replace, replace)
            #expect(replaced.replyJSON.objectValue?["rev"] == .int(2), "\(replaced.replyText)")
            let conflict = try Self.call(c, .replace, replace)
            #expect(conflict.status == .conflict && conflict.replyText.contains("currentRev"), "\(conflict.replyText)")

            // Errors the store finds are the same on either path.
            let badName = try Self.call(c, .create, #"{"collection":"1shop","data":{}}"#)
            #expect(badName.status == .invalidArgument && badName.replyText.contains("collection"))
            let big = String(repeating: "x", count: 300)
            let tooLarge = try Self.call(c, .create, #"{"collection":"shop","data":{"text":"\#(big)"}}"#)
            #expect(tooLarge.status == .payloadTooLarge, "\(tooLarge.replyText)")
            let existing = try Self.call(c, .create, #"{"collection":"shop","id":"\#(ids[1])","data":{}}"#)
            #expect(existing.status == .conflict, "\(existing.replyText)")
            // And those the general parser finds still come from it, with their byte offsets.
            let duplicate = try Self.call(c, .create, #"{"collection":"shop","data":{"a":1,"a":2}}"#)
            #expect(duplicate.status == .invalidArgument && duplicate.replyText.contains("duplicate member name"))
            let unknown = try Self.call(c, .create, #"{"collection":"shop","data":{},"rev":1}"#)
            #expect(unknown.status == .invalidArgument && unknown.replyText.contains("unknown field rev"))
            let badRev = try Self.call(c, .replace, #"{"collection":"shop","id":"\#(ids[0])","rev":0,"data":{}}"#)
            #expect(badRev.status == .invalidArgument && badRev.replyText.contains("rev"), "\(badRev.replyText)")
        }
    }
}
