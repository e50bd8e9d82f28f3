/// The collections the trigram index covers (`text_collections`), as the writer knows them: their rows keep their
/// search text, the others' none (`FixedSQL.insertDocument`), and only theirs enter the index's backlog. The writer
/// must never count a covered collection uncovered (the index would miss its rows), so a drop removes the name only
/// after its COMMIT, and only if the collection is not covered again by then. A cover adds the name as the last step
/// of its job (the rest of its batch writes the collection as covered), and takes it back when that batch does not
/// commit: a collection counted covered that is not would have backlog rows claim the index holds text it never
/// held. Between a drop and its COMMIT the collection counts covered, which only keeps text its rows need not.
/// Only on the writer's queue.
final class CoveredCollections {
    private var names: Set<String>

    init(_ names: [String]) { self.names = Set(names) }

    func contains(_ name: String) -> Bool { names.contains(name) }
    func covered(_ name: String) { names.insert(name) }
    func uncovered(_ name: String) { names.remove(name) }
}
