import Foundation
import LarderWire

/// Point reads (a document by id, a blob's metadata) made in a burst by one thread, such as every GET an I/O loop
/// reads from its sockets in one turn. A store may answer them from one read snapshot, which is what makes them
/// cheap: on SQLite each read transaction takes and drops a WAL read lock with `fcntl(2)`, which cost a fifth of the
/// server's CPU time on a GET-only load (BENCHMARKS.md).
///
/// The guarantee is the same as separate reads: a read sees every write acknowledged before the read began. Call
/// `end()` when the burst is over (before waiting for more work); it releases what the reads hold. Not thread-safe:
/// one owner.
public protocol PointReads: AnyObject {
    /// NOT_FOUND when absent.
    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord
    /// `get(collection, id:).bytes`, the answer to a GET, written without the intermediate record.
    func getJSON(_ collection: String, id: UUID) throws(LarderError) -> [UInt8]
    /// `getJSON` of a caller that may see only `owner`'s records (the `$owner` of the record's data): another's record
    /// is NOT_FOUND, with the same error as a missing one. Nil when the record's bytes are not in the plain form its
    /// owner is read from without parsing (the caller then reads and parses it).
    func getJSON(_ collection: String, id: UUID, ownedBy owner: String) throws(LarderError) -> [UInt8]?
    /// NOT_FOUND when absent.
    func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo
    /// Ends the burst; later reads start a new one.
    func end()
}

extension PointReads {
    public func getJSON(_ collection: String, id: UUID, ownedBy owner: String) throws(LarderError) -> [UInt8]? {
        try PointReadsOwnership.owned(getJSON(collection, id: id), by: owner, collection, id)
    }
}

/// A record read whole, held to its owner.
enum PointReadsOwnership {
    /// `json` when its `$owner` is `owner`; NOT_FOUND, as for a missing id, when it is another's or none; nil when
    /// the bytes are not in the plain form the owner is read from without parsing.
    static func owned(_ json: [UInt8], by owner: String, _ collection: String, _ id: UUID) throws(LarderError)
        -> [UInt8]?
    {
        guard let found = TopLevelMember.find("$owner", inDataOf: json) else { return nil }
        guard found == .string(owner) else { throw StoreRules.notFound(collection, id) }
        return json
    }
}
