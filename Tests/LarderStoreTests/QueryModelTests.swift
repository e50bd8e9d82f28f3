import LarderTestThreads
import LarderWire
import Testing

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct QueryModelTests {
    @Test func parsesAndRoundTrips() throws {
        let text = #"{"filter":{"and":[{"field":"price","op":"lt","value":50},{"or":[{"field":"address.city","op":"in","value":["北京","上海"]},{"not":{"field":"$id","op":"prefix","value":"3f"}}]},{"field":"comment","op":"contains","value":"sweet"},{"field":"photo","op":"exists","value":false}]},"text":{"query":"北京","fields":["name","address"]},"sort":[{"field":"price","order":"desc"},{"field":"name","order":"asc"}],"limit":20,"cursor":"abc"}"#
        let query = try SearchQuery(json: JSONParser.parseObject(Array(text.utf8)))
        #expect(query.limit == 20)
        #expect(query.sort == [SortKey(field: try FieldPath("price"), descending: true), SortKey(field: try FieldPath("name"))])
        #expect(query.text == TextQuery(query: "北京", fields: [try FieldPath("name"), try FieldPath("address")]))
        #expect(try SearchQuery(json: query.json) == query)
        #expect(try FieldPath("address.city").segments == ["address", "city"])
        #expect(try FieldPath("$createdAt").envelope == .createdAt)
        let empty = try SearchQuery(json: [:])
        #expect(empty.limit == 50)
        #expect(empty.filter == nil && empty.text == nil && empty.sort.isEmpty && empty.cursor == nil)
    }

    @Test(arguments: [
        (#"{"filter":{"and":[{"field":"a","op":"eq","value":1},{"field":"b","op":"between","value":1}]}}"#, "filter.and.1.op"),
        (#"{"filter":{"and":[]}}"#, "filter.and"),
        (#"{"filter":{"or":[{"not":{"field":"a..b","op":"eq","value":1}}]}}"#, "filter.or.0.not.field"),
        (#"{"filter":{"field":"a","op":"in","value":1}}"#, "filter.value"),
        (#"{"filter":{"field":"a","op":"in","value":[1,[2]]}}"#, "filter.value.1"),
        (#"{"filter":{"field":"a","op":"lt","value":true}}"#, "filter.value"),
        (#"{"filter":{"field":"a","op":"eq","value":{"x":1}}}"#, "filter.value"),
        (#"{"filter":{"field":"a","op":"exists","value":1}}"#, "filter.value"),
        (#"{"filter":{"field":"a","op":"prefix","value":1}}"#, "filter.value"),
        (#"{"filter":{"field":"a","op":"eq"}}"#, "filter.value"),
        (#"{"filter":{"field":"$nope","op":"eq","value":1}}"#, "filter.field"),
        (#"{"filter":{"field":"a\"b","op":"eq","value":1}}"#, "filter.field"),
        (#"{"filter":{"field":"a","op":"eq","value":1,"extra":2}}"#, "filter.extra"),
        (#"{"filter":{"and":[{"field":"a","op":"eq","value":1}],"or":[]}}"#, "filter"),
        (#"{"filter":[1]}"#, "filter"),
        (#"{"text":{"query":""}}"#, "text.query"),
        (#"{"text":{"query":"a\nb"}}"#, "text.query"),
        (#"{"text":{"query":"a","fields":[]}}"#, "text.fields"),
        (#"{"text":{"query":"a","fields":["$id"]}}"#, "text.fields.0"),
        (#"{"sort":[{"field":"a","order":"up"}]}"#, "sort.0.order"),
        (#"{"sort":{"field":"a"}}"#, "sort"),
        (#"{"limit":0}"#, "limit"),
        (#"{"limit":1001}"#, "limit"),
        (#"{"limit":"5"}"#, "limit"),
        (#"{"cursor":5}"#, "cursor"),
        (#"{"filters":{}}"#, "filters"),
    ])
    func rejectsWithTheOffendingField(text: String, field: String) throws {
        do throws(LarderError) {
            _ = try SearchQuery(json: JSONParser.parseObject(Array(text.utf8)))
            Issue.record("expected INVALID_ARGUMENT for \(text)")
        } catch {
            #expect(error.status == .invalidArgument)
            #expect(error.field == field, "\(error)")
        }
    }

    @Test func capsDepthAndClauses() throws {
        var deep: JSON = ["field": "a", "op": "eq", "value": 1]
        for _ in 0..<40 { deep = ["not": deep] }
        #expect(throws: LarderError.self) { _ = try Filter(json: deep) }
        let wide: JSON = ["or": .array((0..<300).map { _ in ["field": "a", "op": "eq", "value": 1] })]
        #expect(throws: LarderError.self) { _ = try Filter(json: wide) }
        let fine: JSON = ["or": .array((0..<200).map { _ in ["field": "a", "op": "eq", "value": 1] })]
        _ = try Filter(json: fine)
    }
}
