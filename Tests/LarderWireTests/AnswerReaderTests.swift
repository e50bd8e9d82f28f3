import Foundation
import LarderTestThreads
import Testing

@testable import LarderWire
import LarderIO

/// The typed client reads record and page answers without a tree (`AnswerReader`): whenever it answers, the general
/// path (`Record(json:)`, `PageResponse(json:)`) reads the same fields, and the `data` span holds the same object;
/// for any other form it answers nil.
@Suite("Answers read without a tree", .ownThreads, .timeLimit(.minutes(20)))
struct AnswerReaderTests {
    static let id = UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301")!

    static func check(_ bytes: [UInt8], _ span: RecordSpan, _ record: Record) {
        #expect(span.id == record.id && span.rev == record.rev)
        #expect(span.createdAt == record.createdAtMs && span.updatedAt == record.updatedAtMs)
        #expect((try? JSONParser.parseObject(bytes[span.data])) == record.data)
    }

    @Test("record answers as the server writes them, and in other spellings of the same form")
    func records() throws {
        var random = SplitMix64(seed: 0xA5_5E55)
        for n in 0..<500 {
            var text = ""
            RandomJSON.object(depth: 0, into: &text, using: &random)
            let data = try JSONParser.parseObject(Array(text.utf8))
            let record = Record(id: UUID(), rev: Int64(n), createdAtMs: 1_700_000_000_000 + Int64(n), updatedAtMs: 1_764_460_800_123, data: data)
            let compact = record.json.bytes
            let span = try #require(AnswerReader.record(compact))
            Self.check(compact, span, record)
            #expect(Array(compact[span.data]) == data.bytes)  // the stored bytes, as they are
            // A write's answer: the same record, then the change log's number.
            let written = SeqMember.appending(Int64(4711 + n), to: compact)
            Self.check(written, try #require(AnswerReader.record(written)), record)
            // Members in another order, with whitespace, and the data as the client sent it (escapes and all).
            let spaced = "\n{ \"data\" : \(text) ,\"rev\":\(n), \"updatedAt\" : \"2025-11-30T00:00:00.123Z\","
                + "\"createdAt\":\"\(Timestamp.string(record.createdAtMs))\",\"id\":\"\(record.id.uuidString)\" } "
            let bytes = Array(spaced.utf8)
            let general = try Record(json: try JSONParser.parseObject(bytes))
            Self.check(bytes, try #require(AnswerReader.record(bytes)), general)
        }
    }

    @Test("other forms are left to the general path")
    func unusualRecords() throws {
        let id = Self.id.wireString
        let time = "2026-11-30T00:00:00.000Z"
        let base = #""rev":1,"createdAt":"\#(time)","updatedAt":"\#(time)""#
        let texts = [
            #"{"id":"\#(id)",\#(base),"data":{},"extra":1}"#,  // the general path reads it (ignoring the extra)
            #"{"id":"\#(id)","id":"\#(id)",\#(base),"data":{}}"#,
            #"{"id":"3f2504e0-4f89-41d3-9a0c-0305e82c330\u0031",\#(base),"data":{}}"#,
            #"{"id":"\#(id)","rev":1.0,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)","rev":-1,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)","rev":01,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)","rev":1234567890123456789,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)","rev":99999999999999999999999,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)","rev":1,"createdAt":"2026-02-30T00:00:00Z","updatedAt":"\#(time)","data":{}}"#,
            #"{"id":"\#(id)",\#(base)}"#,
            #"{"id":"\#(id)",\#(base),"data":[]}"#,
            #"{"id":"\#(id)",\#(base),"data":{"a":"}"#,
            #"{"id":"\#(id)",\#(base),"data":{"a":"\"}"#,
            #"{"id":"\#(id)",\#(base),"data":{}} x"#,
            #"{"id":"\#(id)",\#(base),"data":{}"#, "", "[]",
        ]
        for text in texts { #expect(AnswerReader.record(Array(text.utf8)) == nil, "\(text)") }
        // rev 0 is a record's (the general path reads 0...Int64.max).
        let zero = Array(#"{"id":"\#(id)","rev":0,"createdAt":"\#(time)","updatedAt":"\#(time)","data":{"s":"}\"{"}}"#.utf8)
        let span = try #require(AnswerReader.record(zero))
        Self.check(zero, span, try Record(json: try JSONParser.parseObject(zero)))
    }

    @Test("pages: records, cursors (up to the longest the server makes) and their absence")
    func pages() throws {
        let records = (0..<5).map { n in
            Record(id: UUID(), rev: 1, createdAtMs: 1_700_000_000_000, updatedAtMs: 1_700_000_000_000,
                   data: ["n": .int(Int64(n)), "s": .string("名 \(n) \"q\"")])
        }
        let longCursor = String(repeating: "c", count: 2 << 20)
        for (list, cursor) in [(records, "abc"), ([], nil), (records, nil), (records, longCursor)] as [([Record], String?)] {
            let response = PageResponse(records: list, nextCursor: cursor)
            let bytes = response.json.bytes
            let (spans, nextCursor) = try #require(AnswerReader.page(bytes))
            let general = try PageResponse(json: try JSONParser.parseObject(bytes))
            #expect(general == response && nextCursor == cursor && spans.count == list.count)
            for (span, record) in zip(spans, list) { Self.check(bytes, span, record) }
        }
        let unusual = [
            #"{"nextCursor":null}"#, #"{"records":[],"nextCursor":"a\u0062"}"#, #"{"records":[1]}"#,
            #"{"records":[],"records":[]}"#, #"{"records":[],"other":1}"#, #"{"records":[]"#,
        ]
        for text in unusual { #expect(AnswerReader.page(Array(text.utf8)) == nil, "\(text)") }
    }
}
