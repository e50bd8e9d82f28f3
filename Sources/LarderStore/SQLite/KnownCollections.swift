/// The collections whose row the writer knows exists, so that a create skips its `INSERT OR IGNORE` into
/// `collections` (a B-tree lookup, and a statement, per write). A name ensured in the open transaction counts once that
/// transaction commits; a job undone to its savepoint, a rolled-back batch and a dropped collection make the writer
/// ensure again. Only on the writer's queue.
final class KnownCollections {
    private var committed: Set<String> = []
    private var pending: Set<String> = []

    func contains(_ name: String) -> Bool { committed.contains(name) || pending.contains(name) }
    func ensured(_ name: String) { pending.insert(name) }
    /// The open transaction's names may be undone (a job's savepoint rolled back).
    func forgetPending() { pending.removeAll() }
    func dropped(_ name: String) {
        committed.remove(name)
        pending.remove(name)
    }
    /// Called after COMMIT.
    func committedPending() {
        committed.formUnion(pending)
        pending.removeAll()
    }
}
