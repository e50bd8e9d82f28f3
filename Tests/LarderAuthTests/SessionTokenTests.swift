import LarderAuth
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Session tokens and the base64url they are written in.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SessionTokenTests {
    @Test func aTokenIs32RandomBytesAsBase64URL() throws {
        let token = SessionToken()
        #expect(token.text.utf8.count == 43)
        #expect(Base64URL.decode(token.text)?.count == 32)
        let many = Set((0..<100).map { _ in SessionToken().text })
        #expect(many.count == 100)
    }

    @Test func theStorageKeyIsTheSHA256OfTheText() throws {
        let token = SessionToken()
        #expect(token.storageKey.count == 32)
        #expect(token.storageKeyHex == SHA256.hex(Array(token.text.utf8)))
        #expect(token.storageKeyHex == SHA256.hexString(token.storageKey))
        let presented = try #require(SessionToken(text: token.text))
        #expect(presented.storageKey == token.storageKey)
        #expect(SessionToken().storageKey != token.storageKey)
    }

    @Test func refusesTextThatIsNotAToken() {
        let good = SessionToken().text
        for text in ["", String(good.dropLast()), good + "A", good + "=", "!" + good.dropFirst(),
            String(good.dropLast()) + "B",  // 43 characters whose last one has unused bits set
        ] {
            #expect(SessionToken(text: text) == nil, "\(text)")
        }
    }

    @Test func itsDescriptionHidesTheToken() {
        let token = SessionToken()
        #expect(!String(describing: token).contains(token.text))
        #expect(!"\(token)".contains(token.text))
    }

    @Test func base64URLRoundTripsAndIsStrict() {
        for length in 0...40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            let text = Base64URL.encode(bytes)
            #expect(text == TestKeys.base64url(bytes))
            #expect(Base64URL.decode(text) == bytes)
        }
        #expect(Base64URL.encode(Array("any carnal pleas".utf8)) == "YW55IGNhcm5hbCBwbGVhcw")
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        for bad in ["YQ==", "a", "+/8", "-_8=", "YW55 IGNh", "YR", "YWF"] {
            #expect(Base64URL.decode(bad) == nil, "\(bad)")
        }
    }
}
