import Foundation
@testable import TransferCore
import XCTest

/// Inputs the fuzz targets (Tests/Fuzz, scripts/fuzz) crashed on, each once a
/// trap that a server's answer could set off in a run.
final class FuzzRegressionTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_750_000_000)

    /// header-value: "9223372036854775807" is Int.max seconds, 2^63 as a Double,
    /// and the give-up message converted it back with Int(_:), which traps.
    func testRetryAfterOfIntMaxSecondsGivesUp() throws {
        let retryAfter = try XCTUnwrap(RetryAfter(header: "9223372036854775807"))
        let decision = RetryPolicy.default.decide(.http(status: 503, retryAfter: retryAfter), attempt: 1, now: now, random: 0.5)
        guard case .giveUp(let reason) = decision else { return XCTFail("\(decision)") }
        XCTAssertTrue(reason.contains("retry in 9223372036854775808 s"), reason)
        // The ordinary message is unchanged.
        XCTAssertEqual(RetryPolicy.default.decide(.http(status: 503, retryAfter: .seconds(601.9)), attempt: 1, now: now, random: 0.5),
                       .giveUp(reason: "the server asked to retry in 601 s, more than the 600 s allowed"))
    }

    /// s3-xml: a server message of control characters, escaped after it was cut to 300
    /// characters, came out longer (each escape is several characters).
    func testAnEscapedServerMessageStaysWithinItsLength() {
        let body = Data(repeating: 0x08, count: 400)
        XCTAssertLessThanOrEqual(ServerMessage.summary(body).count, 300)
        XCTAssertEqual(ServerMessage.summary(Data("<Error><Code>SlowDown</Code></Error>".utf8)), "SlowDown")
    }

    /// header-value: a year past Int32 trapped in parseIMFFixdate's Int32(year - 1900).
    func testHTTPDateWithAHugeYearIsNoFixdate() {
        XCTAssertNil(HTTPDate.parseIMFFixdate("Mon, 31 Feb 299999999999024 23:59:60 GMT"))
        XCTAssertNil(HTTPDate.parseIMFFixdate("Sun, 06 Nov -9223372036854775808 08:49:37 GMT"))
        _ = HTTPDate.parse("Mon, 31 Feb 299999999999024 23:59:60 GMT")
        _ = RetryAfter(header: "Sun, 06 Nov 99999999999 08:49:37 GMT")
        XCTAssertEqual(HTTPDate.parseIMFFixdate("Sun, 06 Nov 1994 08:49:37 GMT"), Date(timeIntervalSince1970: 784_111_777))
        XCTAssertNotNil(HTTPDate.parseIMFFixdate("Fri, 31 Dec 9999 23:59:59 GMT"))
    }

    /// headers: Foundation's DateFormatter traps ("Incorrect range CFRange") when the
    /// text it parsed ends inside a Character, as in a date followed by a combining mark.
    /// Last-Modified and Retry-After come from the server.
    func testHTTPDateWithACombiningMarkIsRejected() {
        XCTAssertNil(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT\u{301}"))
        XCTAssertNil(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT\u{301}"))
        XCTAssertNil(HTTPDate.parse("Sun, 06 Nov\u{D4A} 1994 08:49:37 GMT"))
        XCTAssertNil(RetryAfter(header: "Sat, 29\u{D4A}\u{FFFD} -024 +80:49:37 GMT"))
        XCTAssertNotNil(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"))
        XCTAssertNotNil(HTTPDate.parse("Sun Nov  6 08:49:37 1994"))
    }

    /// header-value: `bytes 0-9223372036854775807/*` counts 2^63 bytes, and DownloadSink's
    /// last - first + 1 (checked against Content-Length) overflowed.
    func testContentRangeWhoseByteCountOverflowsIsRejected() {
        XCTAssertNil(ContentRange(header: "bytes 0-9223372036854775807/*"))
        XCTAssertEqual(ContentRange(header: "bytes 0-9223372036854775806/*"),
                       ContentRange(first: 0, last: 9_223_372_036_854_775_806, completeLength: nil))
        XCTAssertEqual(ContentRange(header: "bytes 9223372036854775805-9223372036854775806/9223372036854775807"),
                       ContentRange(first: 9_223_372_036_854_775_805, last: 9_223_372_036_854_775_806,
                                    completeLength: 9_223_372_036_854_775_807))
    }

    /// s3-xml: a processing instruction without data (`<?x?>`) made
    /// FoundationXML call strlen(NULL) and crash: S3 answers with a
    /// processing instruction are refused before XMLParser sees them; the
    /// XML declaration still parses.
    func testAProcessingInstructionNeverReachesXMLParser() {
        let crash = Data([0x3c, 0x3f, 0xc2, 0x6c, 0x78, 0x92, 0x3f, 0x3e, 0x0a, 0x0a, 0x3c, 0x45, 0x72, 0x3e, 0x72, 0x3e])
        XCTAssertNil(S3XMLElement.parse(crash))
        XCTAssertNil(S3XMLElement.parse("<?x?><a/>"))
        XCTAssertNil(S3XMLElement.parse("<a><?pi?></a>"))
        XCTAssertNil(S3XMLElement.parse("<?xml version=\"1.0\"?><a><?pi?></a>"))
        XCTAssertEqual(S3XMLElement.parse("\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<a><b>1</b></a>")?.value("b"), "1")
        XCTAssertEqual(S3XMLElement.parse("<a><b>2</b></a>")?.value("b"), "2")
        XCTAssertNil(S3XMLElement.parse("<?xml version=\"1.0\""), "an unterminated declaration")
    }

    /// s3-xml: an ETag holding `<` followed by a combining mark (U+065E) was
    /// sent back in CompleteMultipartUpload unescaped, since `<\u{65E}` is one
    /// Character and a Character-wise replace passed it by.
    func testEscapingWorksOnScalarsNotCharacters() {
        let etag = "a<\u{65E}b>\u{301}&\u{301}\"\u{301}"
        let escaped = XMLText.escape(etag)
        XCTAssertFalse(escaped.unicodeScalars.contains("<"), escaped)
        XCTAssertEqual(S3XMLElement.parse("<ETag>\(escaped)</ETag>")?.text, etag)
    }

    /// job-urls (read whole and in pieces): a NUL followed by a combining mark makes one
    /// Character that is not "\u{0}", so a Character-wise check let it through as text.
    func testANULBeforeACombiningMarkIsNotText() {
        let data = Data("https://x-\twub\u{0}\u{65B}ir".utf8)
        guard case .failure(let rejection) = JobFileParser(root: "/data").parse(name: "f.urls", data: data) else {
            return XCTFail("taken as text")
        }
        XCTAssertEqual(rejection.errors.map(\.message), ["not UTF-8 text (binary data?)"])
    }

    /// aws-credentials: a combining mark (U+07AB) after a quote merged with it into one Character,
    /// so the word quoted back did not split into the same words.
    func testACombiningMarkAfterAQuoteStaysOutsideIt() {
        let words = CredentialProcess.arguments("\u{07AB}{\"V{S\"AISec.A")
        XCTAssertEqual(words, ["\u{07AB}{V{SAISec.A"])
        XCTAssertEqual(CredentialProcess.arguments("'\u{07AB}{V{SAISec.A'"), words)
        XCTAssertEqual(CredentialProcess.arguments("'a'\u{0301} b"), ["a\u{0301}", "b"])
    }

    /// metalink: an XML declaration left open ran to a "?>" far on, past tags, and the processing
    /// instruction inside it reached FoundationXML, which crashes on one without data.
    func testAMetalinkDeclarationThatRunsIntoATagIsRefused() {
        let text = #"<?xml version="1.0" encod<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a"><url>https://a.example/a</url></file></metalink><?x l?>"#
        XCTAssertThrowsError(try Metalink.parse(Data(text.utf8), origin: "f.meta4")) { error in
            XCTAssertTrue("\(error)".contains("is not closed by \"?>\" before the first tag"), "\(error)")
        }
    }
}
