import Foundation
import LarderIO
import LarderStore
import LarderWire

/// Who a request held to the collections' rules comes from: a signed-in user (`user`), or a connection without a
/// token on a server that accepts ID tokens (`user` nil).
struct RuledCaller: Sendable {
    var user: String?
    /// The storage key of the session the connection signed in with (an account Larder keeps): checked at each
    /// request, so that a session signed out or revoked, or a disabled user's, stops at the next one.
    var session: [UInt8]? = nil

    /// UNAUTHENTICATED when the caller's session is no longer in force.
    func checkSession(_ access: AccessCache) throws(LarderError) {
        if let session { try access.checkSession(session, of: user) }
    }
}

/// The rules of a collection applied to one request of a user (Protocol.md section 10.4): whether it may run at all,
/// and, under an `owner` rule, the user whose records alone it sees and changes.
enum RulesGate {
    /// The rule of `rules` that `opcode` falls under; nil for RULES_GET, which every caller may send.
    static func access(_ rules: CollectionRules, _ opcode: Opcode) -> CollectionRules.Access? {
        switch opcode {
        case .create: rules.create
        case .replace, .patch: rules.update
        case .delete: rules.delete
        case .rulesGet: nil
        default: rules.read
        }
    }

    /// The owner whose records alone the request may touch (nil: every record), or the PERMISSION_DENIED the rules
    /// give the caller.
    static func admit(
        _ rules: CollectionRules?, _ opcode: Opcode, collection: String, caller: RuledCaller
    ) throws(LarderError) -> String? {
        guard let rules else { throw UserAccess.noRules(opcode, collection: collection, user: caller.user) }
        guard let access = access(rules, opcode) else { return nil }
        // Built only for a refusal: a dictionary per admitted request was a tenth of what a user's GET adds.
        var details: JSONObject { ["opcode": .string(opcode.name), "collection": .string(collection)] }
        switch access {
        case .public:
            return nil
        case .signedIn, .owner:
            guard let user = caller.user else {
                throw LarderError(
                    .permissionDenied,
                    "the rules of \(collection) let only signed-in users send \(opcode.name); sign in with an ID token",
                    details: details)
            }
            return access == .owner ? user : nil
        case .admin:
            throw LarderError(
                .permissionDenied,
                "the rules of \(collection) let only an admin token send \(opcode.name)", details: details)
        }
    }

    /// The filter that keeps the records of `owner`.
    static func ownerFilter(_ owner: String) -> Filter { .compare(FieldPath.owner, .eq, .string(owner)) }

    /// `filter` narrowed to the records of `owner` (nil: not narrowed).
    static func narrowed(_ filter: Filter?, to owner: String?) -> Filter? {
        guard let owner else { return filter }
        guard let filter else { return ownerFilter(owner) }
        return .and([ownerFilter(owner), filter])
    }

    /// The user that `record`'s data names in `$owner`, if any.
    static func owner(of record: StoredRecord) -> String? {
        switch TopLevelMember.find("$owner", in: record.data) {
        case .string(let owner)?: owner
        case .absent?, .notAString?: nil
        case nil: (try? record.decodedData())?[ownerMember]?.stringValue
        }
    }

    /// Whether a caller that sees only `owner`'s records (nil: every record) sees `record`.
    static func visible(_ record: StoredRecord, to owner: String?) -> Bool {
        guard let owner else { return true }
        return Self.owner(of: record) == owner
    }
}

// The requests of connections held to the collections' rules: the rules are read from the store for each request
// (on every server of a shared database alike, so a change holds everywhere at once), then the request runs, narrowed
// to the caller's own records under an `owner` rule. Another user's record answers exactly as a missing one does.
extension Router {
    /// The collection `object` names, validated.
    private static func collection(_ object: JSONObject) throws(LarderError) -> String {
        guard let name = object["collection"]?.stringValue else {
            throw LarderError(.invalidArgument, "collection is required: a collection name", field: "collection")
        }
        try CollectionName.validate(name)
        return name
    }

    /// Runs a read of a caller held to the rules on the work pool and calls `completion` exactly once.
    func submitRuledRead(_ frame: Frame, caller: RuledCaller, completion: @escaping @Sendable (Reply) -> Void) {
        let accepted = pool.submit { [self] in
            completion(reply(to: frame, Result { () throws(LarderError) in try ruledRead(frame, caller) }))
        }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }

    /// Runs a write of a caller held to the rules on the connection's `lane` and calls `completion` exactly once.
    func submitRuledWrite(
        _ frame: Frame, caller: RuledCaller, on lane: WorkPool.Lane, completion: @escaping @Sendable (Reply) -> Void
    ) {
        let accepted = lane.submit { [self] in
            ruledWrite(frame, caller) { [self] result in completion(reply(to: frame, result)) }
        }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }

    /// Narrows a WATCH of a caller held to the rules (`ruledWatch`) on the work pool, and calls `completion` exactly once
    /// with the WATCH the watch machine is to run, or its refusal.
    func submitRuledWatch(
        _ frame: Frame, caller: RuledCaller, completion: @escaping @Sendable (Result<Frame, LarderError>) -> Void
    ) {
        let accepted = pool.submit { [self] in
            completion(Result { () throws(LarderError) in try ruledWatch(frame, caller: caller) })
        }
        if !accepted { completion(.failure(Router.poolFullError(pool))) }
    }

    /// A GET of a caller held to the rules, answered on the event loop as a role token's is (`RequestPlan.inline`),
    /// when nothing needs reading but the record: the caller's session and the collection's rules are current in
    /// `access`, and the store answers point reads locally. Nil otherwise: the request then takes the work pool
    /// (`submitRuledRead`), which reads what is missing and keeps it for the next one. `reads`: as for `answerInline`.
    func inlineRuledGet(
        _ frame: Frame, caller: RuledCaller, memo: inout AccessMemo, reads: @autoclosure () -> any PointReads
    ) -> Reply? {
        guard pointReadsAreLocal, frame.binary.isEmpty, let request = GetRequest.fast(frame.json),
            request.afterSeq == nil
        else { return nil }
        // Only ASCII names: a rules copy is found by `String` equality, which is Unicode-canonical, while the store
        // compares bytes (`CachedPointReads.getJSON`).
        var name = request.collection
        guard name.withUTF8({ $0.allSatisfy { $0 < 0x80 } }) else { return nil }
        let now = monotonicMs()
        let generation = access.generation
        if let session = caller.session, memo.session?.holds(generation: generation, now: now) != true {
            guard let verdict = access.sessionVerdict(session, now: now), verdict.value == caller.user else {
                return nil
            }
            memo.session = verdict
        }
        let rules: CollectionRules
        if let verdict = memo.rules, memo.collection == request.collection,
            verdict.holds(generation: generation, now: now)
        {
            rules = verdict.value
        } else {
            guard let verdict = access.rulesVerdict(request.collection, now: now) else { return nil }
            memo.collection = request.collection
            memo.rules = verdict
            rules = verdict.value
        }
        let json: [UInt8]
        do throws(LarderError) {
            if let owner = try RulesGate.admit(rules, .get, collection: request.collection, caller: caller) {
                guard let owned = try reads().getJSON(request.collection, id: request.id, ownedBy: owner) else {
                    return nil
                }
                json = owned
            } else {
                json = try reads().getJSON(request.collection, id: request.id)
            }
        } catch {
            return reply(to: frame, .failure(error))
        }
        return reply(to: frame, .success((json, [])))
    }

    /// The rules of `collection` for `caller`'s `opcode`: the owner the request is narrowed to, or the refusal.
    private func admit(_ opcode: Opcode, _ collection: String, _ caller: RuledCaller) throws(LarderError) -> String? {
        try caller.checkSession(access)
        return try RulesGate.admit(try access.rules(collection), opcode, collection: collection, caller: caller)
    }

    private func ruledRead(_ frame: Frame, _ caller: RuledCaller) throws(LarderError) -> ([UInt8], [UInt8]) {
        if frame.opcode == .get, let request = GetRequest.fast(frame.json) {
            try CollectionName.validate(request.collection)
            return try ruledGet(request, caller)
        }
        let object = try frame.jsonObject()
        let collection = try Router.collection(object)
        if frame.opcode == .rulesGet {
            try caller.checkSession(access)
            let request = try RulesGetRequest(json: object)
            return (RulesResponse(collection: collection, rules: try store.collectionRules(request.collection))
                .json.bytes, [])
        }
        if frame.opcode == .get { return try ruledGet(try GetRequest(json: object), caller) }
        let owner = try admit(frame.opcode, collection, caller)
        switch frame.opcode {
        case .getMany:
            let request = try GetManyRequest(json: object)
            let (found, _) = try store.getMany(collection, ids: request.ids)
            let records = found.filter { RulesGate.visible($0, to: owner) }
            let seen = Set(records.map(\.id))
            var missing: [UUID] = []
            for id in request.ids where !seen.contains(id) && !missing.contains(id) { missing.append(id) }
            return (Router.getManyBytes(records, missing), [])
        case .list:
            let request = try ListRequest(json: object)
            guard let owner else {
                return (Router.pageBytes(try store.list(collection, limit: request.limit, cursor: request.cursor)), [])
            }
            let query = SearchQuery(filter: RulesGate.ownerFilter(owner), limit: request.limit, cursor: request.cursor)
            return (Router.pageBytes(try store.search(collection, query)), [])
        case .search:
            var request = try SearchRequest(json: object)
            request.query.filter = RulesGate.narrowed(request.query.filter, to: owner)
            return (Router.pageBytes(try store.search(collection, request.query)), [])
        case .count:
            let request = try CountRequest(json: object)
            let count = try store.count(
                collection, filter: RulesGate.narrowed(request.filter, to: owner), text: request.text)
            return (CountResponse(count: count).json.bytes, [])
        case .group:
            var narrowed = object
            if let owner {
                let filter = RulesGate.narrowed(try GroupRequest(json: object).filter, to: owner)
                narrowed["filter"] = filter.map(\.json) ?? .null
            }
            return try read(Frame(opcode: .group, requestID: frame.requestID, json: JSON.object(narrowed).bytes), nil)
        default:
            throw UserAccess.noRules(frame.opcode, collection: nil, user: caller.user)
        }
    }

    /// A GET under the rules: another user's record answers exactly as a missing one.
    private func ruledGet(_ request: GetRequest, _ caller: RuledCaller) throws(LarderError) -> ([UInt8], [UInt8]) {
        let owner = try admit(.get, request.collection, caller)
        let record = try store.get(request.collection, id: request.id)
        guard RulesGate.visible(record, to: owner) else { throw StoreRules.notFound(request.collection, request.id) }
        return (record.bytes, [])
    }

    /// How many times a write of a user that read the record first is tried again when the record changed between
    /// that read and the write (a request without `rev` is not the user's conflict).
    private static let ruledWriteAttempts = 4

    private func ruledWrite(
        _ frame: Frame, _ caller: RuledCaller, attempt: Int = 1,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) {
        let write: RuledWrite
        do throws(LarderError) {
            write = try ruledWriteBody(frame, caller)
        } catch {
            return done(.failure(error))
        }
        guard case .body(let body, let retriable) = write else {
            if case .answered(let stored) = write { done(sequenced(frame, .success((stored, [])))) }
            return
        }
        store.submitSingleWrite(body) { [self] result in
            // The record changed between the read and the write, and the request named no revision: read it again.
            if case .failure(let error) = result, error.status == .conflict, retriable,
                attempt < Router.ruledWriteAttempts,
                pool.submit({ [self] in ruledWrite(frame, caller, attempt: attempt + 1, done) })
            {
                return
            }
            done(sequenced(frame, result))
        }
    }

    /// A write of a caller held to the rules, ready for the writer: its body, and whether a CONFLICT of it is the
    /// server's to retry; or the answer its request key already holds.
    private enum RuledWrite {
        case body(WriteBody, retriable: Bool)
        case answered([UInt8])
    }

    /// What a user's write runs in the writer's transaction, and whether a CONFLICT of it is the server's to retry (a
    /// revision the server read, not one the request sent). CREATE sets `$owner` to the caller (an anonymous caller's
    /// record has none); REPLACE keeps the stored `$owner` and PATCH cannot touch it. Under an `owner` rule a REPLACE,
    /// PATCH or DELETE of a record that is not the caller's is NOT_FOUND, exactly as for a missing one, and changes
    /// nothing: the record is read first, and written at the revision read.
    ///
    /// A `requestKey` is fingerprinted with the caller's id beside the request, so that one caller's key never answers
    /// another's request; the stored answer is looked for before the record is read, so that the retry of a DELETE
    /// that committed answers as the DELETE did rather than NOT_FOUND.
    private func ruledWriteBody(_ frame: Frame, _ caller: RuledCaller) throws(LarderError) -> RuledWrite {
        var object = try frame.jsonObject()
        let key = try RequestKey.take(from: &object)
        let collection = try Router.collection(object)
        let owner = try admit(frame.opcode, collection, caller)
        var fingerprinted = object
        fingerprinted[ownerMember] = caller.user.map { .string($0) } ?? .null
        let keyed = key.map { RequestKey.request($0, frame.opcode, fingerprinted) }
        if let keyed, let stored = try store.requestKeyAnswer(keyed) { return .answered(stored) }
        do throws(LarderError) {
            let (body, retriable) = try ruledWriteBody(frame.opcode, object, collection, owner: owner, caller)
            return .body(keyed.map { $0.wrap(body) } ?? body, retriable: retriable)
        } catch {
            // A retry that raced its own first try: the record it read is gone or changed because that try committed.
            if let keyed, let stored = try store.requestKeyAnswer(keyed) { return .answered(stored) }
            throw error
        }
    }

    private func ruledWriteBody(
        _ opcode: Opcode, _ object: JSONObject, _ collection: String, owner: String?, _ caller: RuledCaller
    ) throws(LarderError) -> (body: WriteBody, retriable: Bool) {
        /// The record as last committed, if `owner` may see it; and the revision to write at.
        func current(_ id: UUID, _ rev: Int64?) throws(LarderError) -> (record: StoredRecord, rev: Int64) {
            let record = try store.get(collection, id: id)
            guard RulesGate.visible(record, to: owner) else { throw StoreRules.notFound(collection, id) }
            return (record, rev ?? record.rev)
        }
        /// `data` encoded and checked against the collection's schema here, on the lane's thread, not the writer.
        func prepared(_ data: JSONObject) -> PreparedDocument {
            var document = PreparedDocument(data)
            store.checkSchemaAhead(collection, &document)
            return document
        }
        switch opcode {
        case .create:
            var request = try CreateRequest(json: object)
            request.data[ownerMember] = caller.user.map { .string($0) }
            let document = prepared(request.data)
            let id = request.id
            return ({ (c) throws(LarderError) in
                (try c.create(collection, id: id, document: document).bytes, [])
            }, false)
        case .replace:
            let request = try ReplaceRequest(json: object)
            let (record, rev) = try current(request.id, request.rev)
            var data = request.data
            data[ownerMember] = RulesGate.owner(of: record).map { .string($0) }
            let document = prepared(data)
            return ({ (c) throws(LarderError) in
                (try c.replace(collection, id: request.id, document: document, expectedRev: rev).bytes, [])
            }, request.rev == nil)
        case .patch:
            var request = try PatchRequest(json: object)
            request.patch[ownerMember] = nil
            let (_, rev) = try current(request.id, request.rev)
            let (id, patch) = (request.id, request.patch)
            return ({ (c) throws(LarderError) in
                (try c.patch(collection, id: id, patch: patch, expectedRev: rev).bytes, [])
            }, request.rev == nil)
        case .delete:
            let request = try DeleteRequest(json: object)
            let (_, rev) = try current(request.id, request.rev)
            return ({ (c) throws(LarderError) in
                let (newRev, blobs) = try c.delete(collection, id: request.id, expectedRev: rev)
                return (DeleteResponse(id: request.id, rev: newRev, blobsDeleted: blobs).json.bytes, [])
            }, request.rev == nil)
        default:
            throw UserAccess.noRules(opcode, collection: nil, user: caller.user)
        }
    }
}

extension Router {
    /// A WATCH of a caller held to the rules, as the watch machine is to run it: on one collection the rules let the
    /// caller read, its filter narrowed to the caller's records under an `owner` rule (deletes included: a deleted
    /// record's event carries the record as it was). Reads the rules from the store: on the work pool
    /// (`submitRuledWatch`), never on an event loop.
    private func ruledWatch(_ frame: Frame, caller: RuledCaller) throws(LarderError) -> Frame {
        var object = try frame.jsonObject()
        guard let collection = Grant.wellFormedCollection(object["collection"]) else {
            if object["collection"] != nil, !(object["collection"]?.isNull ?? true) { return frame }
            throw LarderError(
                .permissionDenied, "a user's WATCH names one collection; send collection",
                details: ["opcode": .string(Opcode.watch.name)])
        }
        guard let owner = try admit(.watch, collection, caller) else { return frame }
        let filter = try object["filter"].flatMap { (json) throws(LarderError) -> Filter? in
            json.isNull ? nil : try Filter(json: json, path: "filter")
        }
        object["filter"] = RulesGate.narrowed(filter, to: owner)?.json
        return Frame(opcode: .watch, requestID: frame.requestID, json: JSON.object(object).bytes)
    }
}
