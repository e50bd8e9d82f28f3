import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

// The index checked against what the rule in TextIndexer's comment says it must hold (for `integrityCheck`).
extension TextIndexer {
    /// The index checked against what the rule says it must hold: for each document outside the backlog its current
    /// text, for each backlog row its `old`. FTS5's own check first, then term by term against a scratch index built
    /// from those texts. `ok` or what differs.
    func check() -> String {
        queue.sync { () -> String in
            do throws(LarderError) {
                try connection.execute("INSERT INTO text_index(text_index) VALUES ('integrity-check')")
                try connection.execute("BEGIN")
                defer {
                    try? connection.execute(
                        "ROLLBACK; DROP TABLE IF EXISTS temp.text_live_terms; "
                            + "DROP TABLE IF EXISTS temp.text_expected_terms; DROP TABLE IF EXISTS temp.text_expected")
                }
                // No pass commits while the documents' snapshot (taken after any leftover settle) is compared.
                _ = try lockIndexFileAndSettleLeftovers()
                try connection.execute(
                    """
                    CREATE VIRTUAL TABLE temp.text_expected USING fts5(
                        search, content='', tokenize='trigram case_sensitive 1', detail=none);
                    INSERT INTO temp.text_expected(rowid, search)
                        SELECT seq, search FROM docs.documents
                            WHERE collection IN (SELECT name FROM docs.text_collections)
                            AND seq NOT IN (SELECT seq FROM docs.fts_backlog)
                        UNION ALL SELECT seq, old FROM docs.fts_backlog WHERE old IS NOT NULL
                        ORDER BY 1;
                    CREATE VIRTUAL TABLE temp.text_live_terms USING fts5vocab(main, text_index, instance);
                    CREATE VIRTUAL TABLE temp.text_expected_terms USING fts5vocab(temp, text_expected, instance);
                    """)
                let differences =
                    try connection.scalar(
                        """
                        SELECT count(*) FROM (
                            SELECT * FROM (SELECT term, doc FROM temp.text_live_terms
                                           EXCEPT SELECT term, doc FROM temp.text_expected_terms)
                            UNION ALL
                            SELECT * FROM (SELECT term, doc FROM temp.text_expected_terms
                                           EXCEPT SELECT term, doc FROM temp.text_live_terms))
                        """) ?? 0
                return differences == 0 ? "ok" : "trigram index: \(differences) entries differ from the documents"
            } catch {
                return "trigram index: \(error.message)"
            }
        }
    }
}
