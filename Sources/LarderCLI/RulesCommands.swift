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

// The `users` commands: the accounts a server started with `--users` keeps.
extension Commands {
    /// A page of accounts: a table on a terminal (and the cursor of the next page), the USERS_LIST answer as JSON
    /// otherwise.
    static func usersOutput(_ out: Output, _ page: UsersPage) {
        if out.json { return out.json(.object(page.json)) }
        out.table(
            ["id", "email", "disabled"], page.users.map { [$0.id, $0.email, $0.disabled ? "yes" : "no"] })
        if let next = page.nextCursor { out.line(out.dim("more: larder users list --cursor '\(next)'")) }
    }

    /// One account after a change (`what`: created, disabled, enabled).
    static func userOutput(_ out: Output, _ user: AccountUser, _ what: String) {
        if out.json { return out.json(.object(user.json)) }
        out.line("\(what) \(user.email) (\(user.id))")
    }
}
