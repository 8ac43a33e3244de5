import Foundation
import XCTest
@testable import TransferCore

final class RedactionTests: XCTestCase {
    func testURLSecretsAreRedacted() throws {
        let url = try XCTUnwrap(URL(string: "https://tok3n:pw@example.com/a?X-Amz-Signature=abc&sig=s&key=k&page=2&refresh_token=r"))
        let shown = Redaction.url(url)
        for secret in ["tok3n", "pw", "abc", "=s&", "=k&", "=r"] {
            XCTAssertFalse(shown.contains(secret), "\(secret) in \(shown)")
        }
        XCTAssertTrue(shown.contains("page=2"), shown)
    }

    func testURLTextIsParsedOnlyWhenItCouldHoldASecret() {
        XCTAssertEqual(Redaction.url(string: "http://example.com/plain/f1.bin"), "http://example.com/plain/f1.bin")
        let shown = Redaction.url(string: "https://user:pw@example.com/a?token=t&page=2")
        XCTAssertFalse(shown.contains("pw") || shown.contains("user") || shown.contains("=t&"), shown)
        XCTAssertTrue(shown.contains("page=2"), shown)
    }

    func testSecretNamesByRuleAreRedacted() {
        for name in ["auth", "CODE", "session", "sid", "State", "ticket", "otp", "refresh_token", "Client_Secret", "sas_key",
                     "db_password", "X-Amz-Signature", "key"] {
            let shown = Redaction.url(string: "https://example.com/cb?page=2&\(name)=hunter2value")
            XCTAssertFalse(shown.contains("hunter2value"), "\(name): \(shown)")
            XCTAssertTrue(shown.contains("page=2") && shown.contains("\(name)=REDACTED"), shown)
        }
        // Compared whole: names that merely hold one of the short words are kept.
        let kept = Redaction.url(string: "https://example.com/a?keyword=k1&statement=s1&codec=c1&sessions=n1")
        XCTAssertEqual(kept, "https://example.com/a?keyword=k1&statement=s1&codec=c1&sessions=n1")
        // The fragment carries parameters too (OAuth's implicit flow puts access_token there).
        XCTAssertEqual(Redaction.url(string: "https://example.com/cb#access_token=at1&x=1"), "https://example.com/cb#access_token=REDACTED&x=1")
    }

    func testNestedURLsAreRedactedRecursively() {
        let plain = Redaction.url(string: "https://example.com/login?next=https://u:hunter2@inner.example/x?sig=s1gvalue&page=2")
        XCTAssertFalse(plain.contains("hunter2") || plain.contains("s1gvalue") || plain.contains("u:"), plain)
        XCTAssertTrue(plain.contains("inner.example") && plain.contains("page=2"), plain)
        let encoded = Redaction.url(string: "https://example.com/login?next=https%3A%2F%2Fu%3Ahunter2%40inner.example%2Fx%3Ftoken%3Dt0kenvalue")
        XCTAssertFalse(encoded.contains("hunter2") || encoded.contains("t0kenvalue"), encoded)
        let twice = Redaction.url(string: "https://e.com/?r=https%253A%252F%252Fu%253Ahunter2%2540i.example%252F")
        XCTAssertFalse(twice.contains("hunter2"), twice)
        // Deeper than the bound: the innermost value goes whole.
        var deep = "https://u:hunter2@bottom.example/"
        for level in 0..<8 { deep = "https://l\(level).example/?n=" + (deep.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "") }
        let shown = Redaction.url(string: deep)
        XCTAssertFalse(shown.contains("hunter2"), shown)
        XCTAssertEqual(Redaction.url(string: shown), shown, "idempotent")
        XCTAssertEqual(Redaction.url(string: plain), plain, "idempotent")
    }

    /// Found by the redaction fuzz target: a nested URL re-escaped only in part read back as
    /// another URL (its `%23` no longer ended the authority), so a second pass changed it.
    func testANestedURLWithAHashAndASecondAtSignIsRedactedIdempotently() {
        let encoded = "https://u:pw@http\u{0}s#:tw@pex".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let once = Redaction.url(string: "https://h.example/?next=" + encoded)
        XCTAssertFalse(once.contains("pw"), once)
        XCTAssertEqual(Redaction.url(string: once), once)
    }

    /// Found by the redaction fuzz target: a combining mark after a separator (`?`, `&`, `@`, a
    /// space) joins it into one character, which a character-wise reading did not take for one.
    func testACombiningMarkAfterASeparatorHidesNoSecret() {
        for url in ["https://h.example/p?\u{6DC}&token=s3cr3tA", "https://h.example/p?a=1&\u{301}token=s3cr3tA",
                    "https://user:s3cr3tA@\u{301}h.example/", "https://h.example/p#\u{6DC}&access_token=s3cr3tA"] {
            let shown = Redaction.url(string: url)
            XCTAssertFalse(shown.contains("s3cr3tA"), shown)
            XCTAssertEqual(Redaction.url(string: shown), shown)
            let said = Redaction.message("failed (\(url))\u{301} and \u{301}more")
            XCTAssertFalse(said.contains("s3cr3tA"), said)
        }
    }

    func testTextThatIsNotAValidURLIsStillRedacted() {
        let shown = Redaction.url(string: "https://u:hunter2@example.com/a b?token=t0kenvalue")
        XCTAssertFalse(shown.contains("hunter2") || shown.contains("t0kenvalue"), shown)
    }

    func testMessagesQuotingURLsAreRedacted() {
        let shown = Redaction.message("Failed to connect to \"http://proxyuser:pr0xypass@proxy.example:3128\" (from https://h/a?sid=s1d0)")
        XCTAssertFalse(shown.contains("pr0xypass") || shown.contains("proxyuser") || shown.contains("s1d0"), shown)
        XCTAssertTrue(shown.contains("proxy.example:3128"), shown)
    }

    /// A URL that a space, a line break or a quote cut in an error text: its parameters after the
    /// cut are still hidden (found by the redaction fuzz target), and a second pass changes nothing.
    func testAURLCutInAMessageStillHidesItsParameters() {
        for text in ["curl: URL rejected: https://h.example/p?a b&token=SECRET1 (bad)",
                     "failed (https://h.example/p?x%25<\u{316}.example@%252F&token=SECRET1)",
                     "failed (https://h.example/p?n\re://0u&token=SECRET1)",
                     "failed (https://h.example/p?hs:// &Client_Secret=SECRET1&hs:// )",
                     "GET https://h.example/p?a=1 failed; then token=SECRET1&page=2"] {
            let shown = Redaction.message(text)
            XCTAssertFalse(shown.contains("SECRET1"), "\(text.debugDescription) -> \(shown.debugDescription)")
            XCTAssertEqual(Redaction.message(shown), shown, "idempotent: \(shown.debugDescription)")
        }
        XCTAssertEqual(Redaction.message("https://h/ a=b&page=2 done"), "https://h/ a=b&page=2 done", "no secret name, nothing hidden")
        XCTAssertEqual(Redaction.message("https://h/ token=SECRET1&page=2"), "https://h/ token=REDACTED&page=2")
        // Text that quotes no URL at all is read as words, not parameters (registered secrets aside).
        XCTAssertEqual(Redaction.message("see token=abc"), "see token=abc")
    }

    func testProxyCredentialsFromTheEnvironmentAreSecrets() {
        let found = Redaction.proxyCredentials(["HTTPS_PROXY": "http://puser:p%40ssw0rd@proxy:8080", "ALL_PROXY": "socks5://only@p2",
                                                "no_proxy": "x:y@z", "PATH": "/bin"])
        XCTAssertEqual(found, ["puser", "p%40ssw0rd", "p@ssw0rd", "only"])
    }

    func testHeaderValues() {
        XCTAssertEqual(Redaction.headerValue(name: "Authorization", value: "AWS4-HMAC-SHA256 Credential=AKIA/..."), "REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "X-Auth-Token", value: "t"), "REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "Location", value: "https://b.s3.amazonaws.com/k?X-Amz-Signature=abc"),
                       "https://b.s3.amazonaws.com/k?X-Amz-Signature=REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "Content-Length", value: "12"), "12")
    }

    func testRegisteredSecretsAreHiddenUnderAnyName() {
        Redaction.registerSecret("s3cr3t-value-from-env")
        XCTAssertEqual(Redaction.headerValue(name: "X-Upload-Auth", value: "Bearer s3cr3t-value-from-env"), "Bearer REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "X-Custom", value: "v=s3cr3t-value-from-env"), "v=REDACTED")
    }
}

final class CRC32Tests: XCTestCase {
    func testKnownValueAndS3Encoding() {
        var crc = CRC32()
        let text = Array("123456789".utf8)
        text.withUnsafeBytes { crc.update($0) }
        XCTAssertEqual(crc.value, 0xCBF4_3926, "the standard CRC-32 check value")
        XCTAssertEqual(crc.base64, "y/Q5Jg==", "big-endian bytes in base64, as x-amz-checksum-crc32 carries them")
        var split = CRC32()
        text[..<4].withUnsafeBytes { split.update($0) }
        text[4...].withUnsafeBytes { split.update($0) }
        XCTAssertEqual(split.value, crc.value, "pieces give the same value as the whole")
    }
}

final class TerminalTextTests: XCTestCase {
    func testBidiAndControlCharactersAreEscapedVisibly() {
        XCTAssertEqual(TerminalText.escaped("invoice\u{202E}fdp.exe"), "invoice\\u{202E}fdp.exe")
        XCTAssertEqual(TerminalText.escaped("a\u{200E}b\u{200F}c\u{2066}d\u{2069}e\u{061C}"), "a\\u{200E}b\\u{200F}c\\u{2066}d\\u{2069}e\\u{61C}")
        XCTAssertEqual(TerminalText.escaped("\u{1B}[31mred\u{7}\u{9B}2J\r\n"), "\\u{1B}[31mred\\u{7}\\u{9B}2J\\u{D}\\u{A}")
        XCTAssertEqual(TerminalText.escaped("plain ünïcødé 名前"), "plain ünïcødé 名前")
    }

    func testServerTextIsEscapedWhereItIsShown() {
        let body = Data("<html><head><title>Denied: see \u{202E}gpj.exe\u{1B}[2J</title></head></html>".utf8)
        XCTAssertEqual(ServerMessage.summary(body), "Denied: see \\u{202E}gpj.exe\\u{1B}[2J")
        XCTAssertEqual(HTTPHeaders.visible("key\u{2067}x\u{200F}"), "key\\u{2067}x\\u{200F}")
        XCTAssertTrue(HTTPHeaders.isInvisibleControl("\u{200E}"), "an S3 key with a bidi mark is refused as a path")
    }
}
