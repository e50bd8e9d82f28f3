import LarderClient

// The `rules` commands: who among signed-in users may use a collection.
extension Commands {
    /// A collection's rules: one `access  who` line each on a terminal, the RULES_GET answer as JSON otherwise.
    static func rulesOutput(_ out: Output, _ collection: String, _ rules: CollectionRules?) {
        if out.json { return out.json(.object(RulesResponse(collection: collection, rules: rules).json)) }
        guard let rules else {
            return out.line("\(collection) has no rules: users may not use it (set them with larder rules set)")
        }
        for (name, access) in [("read", rules.read), ("create", rules.create), ("update", rules.update),
            ("delete", rules.delete)]
        {
            out.line(out.bold(Output.pad(name, 6)) + "  " + access.rawValue)
        }
    }
}
