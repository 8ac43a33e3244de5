import Foundation
@testable import TransferCore
import XCTest

/// The pure decisions that keep hostile job files, command lines and servers
/// from crashing, escaping or leaking (issue: trustworthy under hostile input).
final class HostileInputTests: XCTestCase {
    // MARK: Sizes

    func testSizesThatWouldTrapAreRefused() {
        for text in ["1e30", "1e19", "9223372036854775807", "inf", "-inf", "nan", "INF", "1e400", "0x10", "-1", "", "M", "1.5.5", "2e18K"] {
            XCTAssertNil(ByteSize.parse(text), text)
        }
    }

    func testOrdinarySizesStillParse() {
        XCTAssertEqual(ByteSize.parse("10M"), 10 << 20)
        XCTAssertEqual(ByteSize.parse("1.5G"), 3 << 29)
        XCTAssertEqual(ByteSize.parse("1e3"), 1000)
        XCTAssertEqual(ByteSize.parse("500KiB"), 500 << 10)
        XCTAssertEqual(ByteSize.parse("1024T"), 1 << 50)
        XCTAssertEqual(ByteSize.parse("0"), 0)
    }

    // MARK: Headers

    func testJobHeaderRuleRefusesFramingHopByHopAndRangeHeaders() {
        let refused = ["Content-Length", "Transfer-Encoding", "Host", "Connection", "Keep-Alive", "Proxy-Connection", "TE",
                       "Trailer", "Upgrade", "Expect", "Range", "If-Range"]
        for name in refused {
            for spelling in [name, name.lowercased(), name.uppercased()] {
                let refusal = JobHeaderRule.refusal(name: spelling, value: "1")
                XCTAssertNotNil(refusal, spelling)
                XCTAssertTrue(refusal?.message.hasPrefix("\(name) ") ?? false, "\(String(describing: refusal))")
                XCTAssertTrue(refusal?.message.hasSuffix("; a job cannot set it") ?? false, "\(String(describing: refusal))")
            }
        }
        XCTAssertEqual(JobHeaderRule.refusal(name: "Transfer-Encoding", value: "chunked")?.message,
                       "Transfer-Encoding is set by transferd from the body; a job cannot set it")
        // Lines that would inject are refused by the same rule.
        for (name, value) in [("X-A", "v\r\nHost: evil"), ("X-A", "v\nX"), ("X-A", "a\u{0}b"), ("X-A\r\nHost", "v"), ("", "v")] {
            XCTAssertNotNil(JobHeaderRule.refusal(name: name, value: value), name)
        }
        for (name, value) in [("Authorization", "Bearer x"), ("Accept", "*/*"), ("Content-Type", "text/plain"),
                              ("X-Host", "h"), ("If-None-Match", "\"e\""), ("Hosts", "h")] {
            XCTAssertNil(JobHeaderRule.refusal(name: name, value: value), name)
        }
    }

    func testHeaderLinesThatWouldInjectAreRefused() {
        XCTAssertNotNil(HTTPHeaders.problem(name: "X-A", value: "v\r\nX-Injected: yes"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X-A", value: "v\nX-Injected: yes"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X-A", value: "v\rX"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X-A", value: "secret\u{0}rest"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X-A\r\nX-B", value: "v"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X A", value: "v"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "X:A", value: "v"))
        XCTAssertNotNil(HTTPHeaders.problem(name: "", value: "v"))
        XCTAssertNil(HTTPHeaders.problem(name: "X-Api-Key", value: "Bearer abc\tdef"))
        XCTAssertNil(HTTPHeaders.problem(name: "If-None-Match", value: "\"etag\", W/\"x\""))
        let message = HTTPHeaders.problem(name: "X-A", value: "v\r\nX-Injected: yes") ?? ""
        XCTAssertTrue(message.contains("carriage return"), message)
    }

    func testJobFileWithAnInjectingHeaderIsRejected() {
        let parser = JobFileParser(root: "/data")
        for header in [#""X-A": "v\r\nX-Injected: yes""#, #""X-A": "v\nX-Injected: yes""#, #""X-A\r\nX-B": "v""#,
                       #""X-A": "v\u0000w""#] {
            let text = #"{"url": "https://example.com/a", "headers": {"# + header + "}}"
            guard case .failure(let rejection) = parser.parse(name: "h.json", data: Data(text.utf8)) else {
                return XCTFail("accepted \(header)")
            }
            XCTAssertEqual(rejection.errors.first?.field, "headers", "\(rejection)")
        }
    }

    // MARK: Paths

    func testNULInADestinationIsRejected() {
        let parser = JobFileParser(root: "/data")
        guard case .failure(let rejection) = parser.parse(name: "n.json", data: Data(#"{"url": "https://e.com/a", "dest": "x\u0000.bin"}"#.utf8)) else {
            return XCTFail("a NUL in dest was accepted")
        }
        XCTAssertTrue(rejection.description.contains("NUL"), rejection.description)
    }

    func testTwoDownloadsIntoOneDestinationAreRejected() {
        let parser = JobFileParser(root: "/data")
        let json = #"{"jobs": [{"url": "https://e.com/a.bin", "dest": "x.bin"}, {"url": "https://e.com/b.bin", "dest": "./x.bin"}]}"#
        guard case .failure(let rejection) = parser.parse(name: "d.json", data: Data(json.utf8)) else {
            return XCTFail("two jobs writing x.bin were accepted")
        }
        XCTAssertEqual(rejection.errors.first?.job, 2)
        XCTAssertEqual(rejection.errors.first?.field, "dest")
        let list = "https://e.com/one/a.bin out\nhttps://e.com/two/a.bin out\n"
        guard case .failure = parser.parse(name: "d.urls", data: Data(list.utf8)) else {
            return XCTFail("a list saving two a.bin into out/ was accepted")
        }
    }

    func testURLsWithControlCharactersAreRejected() {
        let parser = JobFileParser(root: "/data")
        guard case .failure(let rejection) = parser.parse(name: "c.json", data: Data(#"{"url": "https://e.com/a\r\nb"}"#.utf8)) else {
            return XCTFail("a URL with CR/LF was accepted")
        }
        XCTAssertEqual(rejection.errors.first?.field, "url")
    }

    func testHugeOrInfiniteSizesInJobFilesAreErrorsNotCrashes() {
        let parser = JobFileParser(root: "/data")
        for (field, value) in [("limit_rate", "1e30"), ("limit_rate", "inf"), ("limit_rate", "nan")] {
            let text = #"{"url": "https://e.com/a", ""# + field + #"": ""# + value + #""}"#
            guard case .failure(let rejection) = parser.parse(name: "s.json", data: Data(text.utf8)) else {
                return XCTFail("\(field) \(value) was accepted")
            }
            XCTAssertEqual(rejection.errors.first?.field, field)
        }
        let upload = #"{"type": "s3-upload", "url": "s3://b/k", "source": "f", "part_size": "1e30"}"#
        guard case .failure = parser.parse(name: "p.json", data: Data(upload.utf8)) else { return XCTFail("part_size 1e30 accepted") }
    }

    func testAnS3PrefixIsNotDownloadedAsAFile() {
        let parser = JobFileParser(root: "/data")
        guard case .failure(let rejection) = parser.parse(name: "p.json", data: Data(#"{"url": "s3://bucket/prefix/"}"#.utf8)) else {
            return XCTFail("an s3:// prefix was accepted as a download")
        }
        XCTAssertTrue(rejection.description.contains("prefix"), rejection.description)
    }

    func testNamesFromURLsNeverLeaveTheFolder() {
        XCTAssertEqual(URLFileName.of(URL(string: "http://h/ok/..%2F..%2Fescape.bin")!), ".._.._escape.bin")
        XCTAssertEqual(URLFileName.of(URL(string: "http://h/ok/%2E%2E")!), "index.html")
        XCTAssertEqual(URLFileName.of(URL(string: "http://h/")!), "index.html")
        XCTAssertEqual(URLFileName.of(URL(string: "http://h/a%0Ab.bin")!), "a_b.bin")
        XCTAssertEqual(URLFileName.of(URL(string: "http://h/dir/file.iso?x=1")!), "file.iso")
        let parser = JobFileParser(root: "/data")
        let jobs = try? parser.parse(name: "e.json", data: Data(#"{"url": "http://h/ok/..%2F..%2Fescape.bin", "dest": "out/"}"#.utf8)).get()
        XCTAssertEqual(jobs?.first?.destination, "/data/out/.._.._escape.bin")
    }

    func testNoJobReadsOrWritesInsideTheQueueFolder() {
        let parser = JobFileParser(root: "/srv", queueDirectory: "/srv/queue.d")
        for text in [#"{"type": "put", "url": "https://attacker.example/", "source": "queue.d/.transferd/state.db"}"#,
                     #"{"url": "https://e.com/x.json", "dest": "queue.d/"}"#,
                     #"{"url": "https://e.com/x", "dest": "/srv/queue.d/new.json"}"#] {
            guard case .failure(let rejection) = parser.parse(name: "q.json", data: Data(text.utf8)) else {
                return XCTFail("accepted \(text)")
            }
            XCTAssertTrue(rejection.description.contains("inside the queue folder"), rejection.description)
        }
        XCTAssertNotNil(try? parser.parse(name: "q.json", data: Data(#"{"url": "https://e.com/x", "dest": "queue.data/x"}"#.utf8)).get())
    }

    func testARangeEndingAtInt64MaxIsNotARange() {
        XCTAssertNil(ContentRange(header: "bytes 0-9223372036854775807/*"))
        XCTAssertEqual(ContentRange(header: "bytes 0-9223372036854775806/*")?.last, Int64.max - 1)
        for lie in ["bytes -5-10/20", "bytes --5-10/20", "bytes +5-10/20", "bytes 5-+10/20", "bytes 5-10/+20", "bytes 5-10/", "bytes 5--10/20"] {
            XCTAssertNil(ContentRange(header: lie), lie)
        }
        XCTAssertEqual(ContentRange(header: "bytes 5-10/20"), ContentRange(first: 5, last: 10, completeLength: 20))
    }

    func testAWholeBodyContentRangeOnA200IsHarmless() {
        let answer = ResponseDecision.Answer(status: 200, contentLength: 1000)
        let whole = ResponseDecision.Asked(offset: 0, end: nil, sentRange: false)
        let ranged = ResponseDecision.Asked(offset: 0, end: nil, sentRange: true)
        XCTAssertTrue(ResponseDecision.coversWholeBody("bytes 0-999/1000", answer: answer, asked: whole))
        XCTAssertFalse(ResponseDecision.coversWholeBody("bytes 0-499/1000", answer: answer, asked: whole))
        XCTAssertFalse(ResponseDecision.coversWholeBody("bytes 0-999/1000", answer: answer, asked: ranged))
        XCTAssertFalse(ResponseDecision.coversWholeBody("bytes 0-999/2000", answer: answer, asked: whole))
    }

    // MARK: Redirects

    func request(_ url: String, headers: HTTPHeaders, method: String = "GET", body: RequestBody = .none) -> TransferRequest {
        TransferRequest(method: method, url: URL(string: url)!, headers: headers, body: body, maxRedirects: 3)
    }

    func testRedirectsToOtherProtocolsAreRefused() {
        let first = request("http://127.0.0.1:8080/a", headers: [:])
        for location in ["ftp://127.0.0.1/secret", "file:///etc/passwd", "gopher://h/x", "dict://h/x"] {
            guard case .failure(let error) = RedirectPolicy.next(after: first, original: first, status: 302, location: location, hops: 1) else {
                return XCTFail("followed \(location)")
            }
            XCTAssertEqual(error.kind, .redirectRefused, location)
        }
    }

    func testCredentialsStayWithTheirOrigin() {
        Redaction.registerSecret("s3cr3t-from-env")
        let headers: HTTPHeaders = ["Authorization": "Bearer x", "Cookie": "a=b", "X-Api-Key": "k", "X-Auth-Token": "t",
                                    "X-Custom": "v s3cr3t-from-env", "Accept": "*/*", "User-Agent": "transferd"]
        let first = request("http://127.0.0.1:8080/a", headers: headers)
        let elsewhere = try? RedirectPolicy.next(after: first, original: first, status: 302, location: "http://localhost:8080/b", hops: 1).get()
        XCTAssertEqual(elsewhere?.headers.fields.map(\.name).sorted(), ["Accept", "User-Agent"])
        XCTAssertEqual(elsewhere?.url.absoluteString, "http://localhost:8080/b")
        // Another port or scheme is another origin too.
        let otherPort = try? RedirectPolicy.next(after: first, original: first, status: 307, location: "http://127.0.0.1:9090/b", hops: 1).get()
        XCTAssertNil(otherPort?.headers["Authorization"])
        // The same origin keeps them; a relative Location resolves against the request.
        let same = try? RedirectPolicy.next(after: first, original: first, status: 301, location: "/c?x=1", hops: 1).get()
        XCTAssertEqual(same?.headers, headers)
        XCTAssertEqual(same?.url.absoluteString, "http://127.0.0.1:8080/c?x=1")
    }

    func testSeeOtherBecomesAGetAndTheHopLimitHolds() {
        let post = request("http://h/a", headers: ["Content-Type": "text/plain"], method: "POST", body: .data(Data("x".utf8)))
        let next = try? RedirectPolicy.next(after: post, original: post, status: 303, location: "/done", hops: 1).get()
        XCTAssertEqual(next?.method, "GET")
        XCTAssertEqual(next?.body, RequestBody.none)
        XCTAssertNil(next?.headers["Content-Type"])
        let put = request("http://h/a", headers: [:], method: "PUT", body: .data(Data("x".utf8)))
        XCTAssertEqual(try? RedirectPolicy.next(after: put, original: put, status: 307, location: "/b", hops: 1).get().method, "PUT")
        guard case .failure(let error) = RedirectPolicy.next(after: put, original: put, status: 302, location: "/b", hops: 4) else {
            return XCTFail("a fourth hop with a limit of 3 was followed")
        }
        XCTAssertEqual(error.kind, .tooManyRedirects)
    }
}
