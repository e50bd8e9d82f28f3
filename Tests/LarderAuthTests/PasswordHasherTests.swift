import LarderAuth
import LarderTestSupport
import LarderTestThreads
import Testing

/// Argon2id password hashes: their form, checking right and wrong passwords, rehashing, and bounds.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PasswordHasherTests {
    /// Cheap parameters, so the suite spends its time on behaviour rather than on memory-hard hashing.
    let cheap = PasswordHasher(parameters: .init(iterations: 1, memoryKiB: 1024, parallelism: 1))

    @Test func theStoredHashIsArgon2idWithTheRecommendedParameters() throws {
        let hasher = PasswordHasher()
        let stored = try hasher.hash("correct horse battery staple")
        #expect(stored.hasPrefix("$argon2id$v=19$m=19456,t=2,p=1$"))
        #expect(PasswordHasher.parameters(of: stored) == .recommended)
        #expect(try hasher.verify("correct horse battery staple", against: stored))
        #expect(!hasher.needsRehash(stored))
    }

    @Test func verifiesTheRightPasswordAndRefusesAWrongOne() throws {
        let stored = try cheap.hash("hunter2-but-longer")
        #expect(try cheap.verify("hunter2-but-longer", against: stored))
        #expect(try !cheap.verify("hunter2-but-longeR", against: stored))
        #expect(try !cheap.verify("", against: stored))
        // Each hash has its own salt.
        #expect(try cheap.hash("hunter2-but-longer") != stored)
        // Parameters come from the hash, not the hasher.
        #expect(try PasswordHasher().verify("hunter2-but-longer", against: stored))
    }

    @Test func needsRehashWhenParametersDiffer() throws {
        let stored = try cheap.hash("a long enough password")
        #expect(!cheap.needsRehash(stored))
        #expect(PasswordHasher().needsRehash(stored))
        #expect(PasswordHasher(parameters: .init(iterations: 1, memoryKiB: 1024, parallelism: 2)).needsRehash(stored))
        #expect(cheap.needsRehash("$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"))
        #expect(cheap.needsRehash("garbage"))
    }

    @Test func normalizesPasswordsToNFKC() throws {
        let stored = try cheap.hash("caf\u{E9} au lait")
        #expect(try cheap.verify("cafe\u{301} au lait", against: stored))
    }

    @Test func boundsPasswordLengthWithoutQuotingThePassword() throws {
        let short = "seven77"
        let long = String(repeating: "x", count: PasswordHasher.maximumPasswordBytes + 1)
        #expect(throws: PasswordError.tooShort(minimum: 8)) { try cheap.hash(short) }
        #expect(throws: PasswordError.tooLong(maximum: 1024)) { try cheap.hash(long) }
        for (password, error) in [(short, PasswordError.tooShort(minimum: 8)), (long, .tooLong(maximum: 1024))] {
            #expect(!error.description.contains(password))
            #expect(!String(describing: error).contains(password))
        }
        _ = try cheap.hash("eight888")
        _ = try cheap.hash(String(repeating: "x", count: PasswordHasher.maximumPasswordBytes))
        // A longer password matches no hash, and is not hashed.
        let stored = try cheap.hash("eight888")
        #expect(try !cheap.verify(long, against: stored))
    }

    @Test func refusesHashesThatAreNotArgon2idOrAskTooMuch() throws {
        let password = "a long enough password"
        let stored = try cheap.hash(password)
        let bcrypt = "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"
        let argon2i = stored.replacingOccurrences(of: "$argon2id$", with: "$argon2i$")
        let huge = stored.replacingOccurrences(of: "m=1024", with: "m=4194304")
        let damaged = String(stored.dropLast(10))
        let cases: [(String, PasswordError)] = [
            (bcrypt, .notArgon2id), (argon2i, .notArgon2id), ("", .notArgon2id), (huge, .malformedHash),
            ("$argon2id$v=16$m=1024,t=1,p=1$c2FsdHNhbHQ$aGFzaA", .malformedHash),
            ("$argon2id$v=19$m=1024,t=1$c2FsdHNhbHQ$aGFzaA", .malformedHash),
            (damaged, .malformedHash),
        ]
        for (hash, expected) in cases {
            #expect(throws: expected, "\(hash)") { try cheap.verify(password, against: hash) }
            #expect(!expected.description.contains(password))
        }
    }

    @Test func readsTheParametersOfAHash() {
        let parameters = PasswordHasher.parameters(of: "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2g")
        #expect(parameters == .init(iterations: 3, memoryKiB: 65536, parallelism: 4))
        #expect(parameters?.description == "m=65536,t=3,p=4")
        #expect(PasswordHasher.parameters(of: "$argon2id$v=19$m=1,m=2,t=3$s$h") == nil)
    }
}
