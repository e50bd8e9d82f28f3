import LarderWire

// Users: the signed-in user of a client that gives ID tokens, and the rules admins set per collection.
extension LarderClient {
    /// The id of the user this client is signed in as: `ISSUER|SUBJECT` by an ID token (`signIn(idToken:)`,
    /// `Configuration.idTokenProvider`), `larder|UUID` by a session; nil for a client with a role token or none.
    /// Connects first if no connection is open.
    ///
    /// - Throws: `UNAUTHENTICATED` when the server refuses the ID token (the message says why: expired, wrong
    ///   audience...), and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    public var user: String? {
        get async throws(LarderError) { try await serverHello().user?.id }
    }

    /// Sets `collection`'s rules for signed-in users (an admin token's request): who may read, create, update and
    /// delete its records (Protocol.md section 10.4). Replaces any earlier rules.
    ///
    /// - Throws: `PERMISSION_DENIED` for a token that is not `admin` and for every user; `INVALID_ARGUMENT` for a bad
    ///   collection name; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func setRules(_ rules: CollectionRules, for collection: String) async throws(LarderError) -> CollectionRules {
        let answer = try await message(
            RulesResponse.self, .rulesSet, RulesSetRequest(collection: collection, rules: rules).json)
        return answer.rules ?? rules
    }

    /// `collection`'s rules for signed-in users; nil when it has none (users may not use it).
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or
    ///   `PERMISSION_DENIED` as any request.
    public func rules(for collection: String) async throws(LarderError) -> CollectionRules? {
        try await message(RulesResponse.self, .rulesGet, RulesGetRequest(collection: collection).json).rules
    }
}

extension LarderCollection {
    /// Sets this collection's rules for signed-in users (an admin token's request); see `LarderClient.setRules`.
    @discardableResult
    public func setRules(_ rules: CollectionRules) async throws(LarderError) -> CollectionRules {
        try await client.setRules(rules, for: name)
    }

    /// This collection's rules for signed-in users; nil when it has none (see `LarderClient.rules(for:)`).
    public func rules() async throws(LarderError) -> CollectionRules? {
        try await client.rules(for: name)
    }
}
