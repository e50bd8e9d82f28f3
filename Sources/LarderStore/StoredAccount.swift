import Foundation
import LarderWire

/// An account Larder keeps, as the store holds it: its id (`larder|<uuid>`), email (lowercased), Argon2id password
/// hash (a PHC string) and whether it is disabled. Its sessions are kept apart, by the SHA-256 of their tokens.
public struct StoredAccount: Sendable, Equatable {
    public var id: String
    public var email: String
    public var passwordHash: String
    public var disabled: Bool
    /// Milliseconds since 1970.
    public var createdAt: Int64

    public init(id: String, email: String, passwordHash: String, disabled: Bool = false, createdAt: Int64) {
        self.id = id
        self.email = email
        self.passwordHash = passwordHash
        self.disabled = disabled
        self.createdAt = createdAt
    }

    /// The account as answers show it, without its hash.
    public var user: AccountUser { AccountUser(id: id, email: email, disabled: disabled, createdAt: createdAt) }

    /// NOT_FOUND for an account named `name` (an id or an email).
    package static func notFound(_ name: String) -> LarderError {
        LarderError(.notFound, "no user \(name); larder users list shows the users", field: "user")
    }

    /// CONFLICT for an email taken by another account.
    package static let emailTaken = LarderError(
        .conflict, "an account with this email exists; sign in, or choose another email", field: "email")

    /// Whether `name` is an account id (`larder|…`) rather than an email.
    package static func isId(_ name: String) -> Bool { name.hasPrefix(accountIdPrefix) }
}
