/// The collections the trigram index covers (`text_collections`), as the writer knows them: their rows keep their
/// search text, the others' none (`FixedSQL.insertDocument`). The writer may count a collection covered that is not
/// (a cover undone with its savepoint, a drop not yet committed): its rows then keep text they need not, which is
/// harmless; it never counts one uncovered that is, for the index would miss that collection's rows. So a cover adds
/// the name inside its transaction, and a drop removes it only after its COMMIT. Only on the writer's queue.
final class CoveredCollections {
    private var names: Set<String>

    init(_ names: [String]) { self.names = Set(names) }

    func contains(_ name: String) -> Bool { names.contains(name) }
    func covered(_ name: String) { names.insert(name) }
    func uncovered(_ name: String) { names.remove(name) }
}
