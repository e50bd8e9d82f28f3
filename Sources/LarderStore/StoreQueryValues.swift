import LarderWire

// The store's side of what it shares with clients (LarderWire's FilterEvaluator, Cursor and SortValue): its records
// and its SQL values in their terms.

extension FilterEvaluator {
    /// True when the stored document `record` (its data decoded as `data`) matches `filter`.
    package static func matches(_ filter: Filter, record: StoredRecord, data: JSONObject) -> Bool {
        matches(filter, record: record.envelope, data: data)
    }
}

extension StoredRecord {
    /// The envelope filters and sorts read.
    package var envelope: RecordEnvelope { RecordEnvelope(id: id, rev: rev, createdAt: createdAt, updatedAt: updatedAt) }
}

extension Cursor {
    /// A sort value as the cursor keeps it (`SortValue.cursorJSON`): a BLOB in the sort is an array's or object's JSON
    /// text (`FieldPath.sortKeySQL`).
    static func json(_ value: SQLValue) -> JSON {
        switch value {
        case .null: SortValue.null.cursorJSON
        case .int(let i): SortValue.int(i).cursorJSON
        case .double(let d): SortValue.real(d).cursorJSON
        case .text(let s): SortValue.text(s).cursorJSON
        case .blob(let bytes): SortValue.blob(bytes).cursorJSON
        }
    }

    /// The SQL value of a sort value a cursor carries; nil for anything a cursor never holds.
    static func sqlValue(_ json: JSON) -> SQLValue? {
        switch SortValue(cursorJSON: json) {
        case nil: nil
        case .null?: .null
        case .int(let i)?: .int(i)
        case .real(let d)?: .double(d)
        case .text(let s)?: .text(s)
        case .blob(let bytes)?: .blob(bytes)
        }
    }
}
