import LarderIO
import LarderStore
import LarderWire
import Synchronization

/// The sessions in force and the collections' rules this server last read from the store, so that a signed-in user's
/// request is checked without reading them again: those two reads were most of what a user's GET cost beyond a role
/// token's (BENCHMARKS.md).
///
/// A copy is used only while the store's `accessGeneration` is the one it was read at: every sign-out, revocation,
/// disabled or deleted user and RULES_SET made through this server moves it after its COMMIT and before its answer,
/// so from that answer on no request here is checked against the old copy. On a store other servers write too
/// (PostgreSQL), their changes do not move it: there a copy is also used for at most `sharedWindowMs` after it was
/// read (`AccountLimits.accessCacheMs`, 0: never), which bounds how long another server's sign-out or rules change
/// takes to hold here. A session's copy is never used past the session's expiry.
///
/// Only what was found is kept: a session in force (one entry per session presented to this server, swept of expired
/// and stale entries as the table grows) and a collection's rules (one per collection that has rules). Every thread.
final class AccessCache: Sendable {
    /// A session's storage key, hashed by its first eight bytes: it is a SHA-256, so they spread as well as all 32.
    struct SessionKey: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { raw in
                hasher.combine(raw.count >= 8 ? raw.loadUnaligned(as: UInt64.self) : UInt64(raw.count))
            }
        }
    }

    private struct Session {
        var user: String
        /// When the session expires, on the monotonic clock (ms).
        var expiresAtMs: UInt64
        var generation: UInt64
        var readAtMs: UInt64
    }

    private struct Rules {
        var rules: CollectionRules
        var generation: UInt64
        var readAtMs: UInt64
    }

    private struct State {
        var sessions: [SessionKey: Session] = [:]
        var rules: [String: Rules] = [:]
        /// The session table's size after its last sweep: it is swept again when it doubles.
        var sweptAt = 0
    }

    let store: any DocumentStore
    /// On a shared store: how long a copy is used after it was read (ms); nil on a store only this process writes.
    let sharedWindowMs: UInt64?
    private let state = Mutex(State())

    /// `sharedWindowMs`: `AccountLimits.accessCacheMs`, used only when the store is shared.
    init(store: any DocumentStore, sharedWindowMs: Int) {
        self.store = store
        self.sharedWindowMs = store.isShared ? UInt64(max(0, sharedWindowMs)) : nil
    }

    private func fresh(generation: UInt64, readAtMs: UInt64, current: UInt64, now: UInt64) -> Bool {
        guard generation == current else { return false }
        guard let window = sharedWindowMs else { return true }
        return now &- readAtMs < window
    }

    /// The user whose session `key` is in force, from the copy when it is current; nil when this copy cannot
    /// answer (the caller then reads the store, `checkSession`).
    func cachedUser(ofSession key: [UInt8], now: UInt64 = monotonicMs()) -> String? {
        sessionVerdict(key, now: now)?.value
    }

    /// What a copy says, for a connection to keep (`AccessMemo`): it holds while the store's `accessGeneration` is
    /// `generation` and the monotonic clock is before `untilMs`, exactly as long as the copy itself is used.
    struct Verdict<Value> {
        var value: Value
        var generation: UInt64
        var untilMs: UInt64

        func holds(generation current: UInt64, now: UInt64) -> Bool { generation == current && now < untilMs }
    }

    /// The store's access generation now.
    var generation: UInt64 { store.accessGeneration }

    /// The last moment (monotonic, ms) a copy read at `readAtMs` is used, past which it is read again.
    private func until(readAtMs: UInt64) -> UInt64 {
        guard let window = sharedWindowMs else { return .max }
        return readAtMs &+ window
    }

    /// The copy's verdict on session `key` (its user), nil when this copy cannot answer.
    func sessionVerdict(_ key: [UInt8], now: UInt64) -> Verdict<String>? {
        let current = store.accessGeneration
        return state.withLock { state -> Verdict<String>? in
            guard let entry = state.sessions[SessionKey(bytes: key)], now < entry.expiresAtMs,
                fresh(generation: entry.generation, readAtMs: entry.readAtMs, current: current, now: now)
            else { return nil }
            return Verdict(
                value: entry.user, generation: entry.generation,
                untilMs: min(entry.expiresAtMs, until(readAtMs: entry.readAtMs)))
        }
    }

    /// UNAUTHENTICATED unless the session `key` of `user` is in force: from the copy when it is current, else read
    /// from the store (and kept).
    func checkSession(_ key: [UInt8], of user: String?) throws(LarderError) {
        if let cached = cachedUser(ofSession: key) {
            guard cached == user else { throw PasswordAccounts.sessionEnded }
            return
        }
        // The generation is read first: a change committed during the read moves it, and the copy is then unused.
        let generation = store.accessGeneration
        let wallNow = PasswordAccounts.now()
        let now = monotonicMs()
        guard let found = try store.sessionAccount(key: key, now: wallNow), found.user == user else {
            throw PasswordAccounts.sessionEnded
        }
        let entry = Session(
            user: found.user, expiresAtMs: now &+ UInt64(max(0, found.expiresAt - wallNow)), generation: generation,
            readAtMs: now)
        guard sharedWindowMs != 0 else { return }
        state.withLock { state in
            state.sessions[SessionKey(bytes: key)] = entry
            guard state.sessions.count >= max(1024, 2 * state.sweptAt) else { return }
            let current = store.accessGeneration
            state.sessions = state.sessions.filter {
                now < $0.value.expiresAtMs
                    && fresh(generation: $0.value.generation, readAtMs: $0.value.readAtMs, current: current, now: now)
            }
            state.sweptAt = state.sessions.count
        }
    }

    /// `collection`'s rules from the copy when it is current, nil when this copy cannot answer (no rules, or none
    /// known: the caller then reads the store, `rules`).
    func cachedRules(_ collection: String, now: UInt64 = monotonicMs()) -> CollectionRules? {
        rulesVerdict(collection, now: now)?.value
    }

    /// The copy's verdict on `collection`'s rules, nil when this copy cannot answer.
    func rulesVerdict(_ collection: String, now: UInt64) -> Verdict<CollectionRules>? {
        let current = store.accessGeneration
        return state.withLock { state -> Verdict<CollectionRules>? in
            guard let entry = state.rules[collection],
                fresh(generation: entry.generation, readAtMs: entry.readAtMs, current: current, now: now)
            else { return nil }
            return Verdict(value: entry.rules, generation: entry.generation, untilMs: until(readAtMs: entry.readAtMs))
        }
    }

    /// `collection`'s rules (nil: it has none), from the copy when it is current, else read from the store.
    func rules(_ collection: String) throws(LarderError) -> CollectionRules? {
        if let cached = cachedRules(collection) { return cached }
        let generation = store.accessGeneration
        let now = monotonicMs()
        guard let rules = try store.collectionRules(collection) else { return nil }
        if sharedWindowMs != 0 {
            state.withLock { $0.rules[collection] = Rules(rules: rules, generation: generation, readAtMs: now) }
        }
        return rules
    }
}

/// One connection's last verdicts from `AccessCache`: its session's, and the rules of the collection it last read.
/// Used on the connection's event loop only, without the table's lock or a hash of the session key, for exactly as
/// long as the copies they came from would be (`AccessCache.Verdict.holds`).
struct AccessMemo {
    var session: AccessCache.Verdict<String>?
    var collection = ""
    var rules: AccessCache.Verdict<CollectionRules>?
}
