import Foundation
@testable import TransferCore
import XCTest

final class RetryPolicyTests: XCTestCase {
    let policy = RetryPolicy(maxAttempts: 5, baseDelay: 1, multiplier: 2, maxDelay: 30, jitter: 0.2, maxRetryAfter: 600)

    func testBackoffDoublesAndIsCapped() {
        // random 0.5 means no jitter.
        XCTAssertEqual(policy.backoff(attempt: 1, random: 0.5), 1, accuracy: 1e-9)
        XCTAssertEqual(policy.backoff(attempt: 2, random: 0.5), 2, accuracy: 1e-9)
        XCTAssertEqual(policy.backoff(attempt: 4, random: 0.5), 8, accuracy: 1e-9)
        XCTAssertEqual(policy.backoff(attempt: 10, random: 0.5), 30, accuracy: 1e-9)
    }

    func testJitterStaysWithinItsFraction() {
        XCTAssertEqual(policy.backoff(attempt: 3, random: 0), 3.2, accuracy: 1e-9)
        XCTAssertEqual(policy.backoff(attempt: 3, random: 0.999999), 4.8, accuracy: 1e-4)
        XCTAssertLessThanOrEqual(policy.backoff(attempt: 20, random: 0.999), 30)
    }

    func testNetworkErrorsAndRetryableStatusesRetry() {
        for kind: TransportError.Kind in [.dns, .connect, .reset, .timeout, .truncated] {
            XCTAssertEqual(policy.decide(.transport(kind), attempt: 1, random: 0.5), .retry(after: 1), "\(kind)")
        }
        for status in [408, 429, 500, 502, 503, 504] {
            XCTAssertEqual(policy.decide(.http(status: status, retryAfter: nil), attempt: 2, random: 0.5),
                           .retry(after: 2), "\(status)")
        }
    }

    func testOtherClientErrorsFailFast() {
        for status in [400, 401, 403, 404, 410, 416] {
            XCTAssertEqual(policy.decide(.http(status: status, retryAfter: nil), attempt: 1, random: 0.5),
                           .giveUp(reason: "HTTP \(status)"), "\(status)")
        }
        for kind: TransportError.Kind in [.tls, .tooManyRedirects, .cancelled, .unsupported] {
            if case .retry = policy.decide(.transport(kind), attempt: 1) { XCTFail("\(kind) must not retry") }
        }
        if case .retry = policy.decide(.local, attempt: 1) { XCTFail("local errors must not retry") }
    }

    /// The one classifier, as a table: every path (downloads, uploads, the S3 client, the queue's
    /// prefix jobs) asks it. 501 was retried five times (13-15 s) before.
    func testTheClassifierTable() {
        let table: [(RetryPolicy.Failure, Bool)] = [
            (.http(status: 408, retryAfter: nil), true), (.http(status: 425, retryAfter: nil), true),
            (.http(status: 429, retryAfter: nil), true), (.http(status: 500, retryAfter: nil), true),
            (.http(status: 502, retryAfter: nil), true), (.http(status: 503, retryAfter: nil), true),
            (.http(status: 504, retryAfter: nil), true), (.http(status: 507, retryAfter: nil), true),
            (.http(status: 599, retryAfter: nil), true),
            (.http(status: 501, retryAfter: nil), false), (.http(status: 505, retryAfter: nil), false),
            (.http(status: 506, retryAfter: nil), false), (.http(status: 508, retryAfter: nil), false),
            (.http(status: 510, retryAfter: nil), false), (.http(status: 511, retryAfter: nil), false),
            (.http(status: 400, retryAfter: nil), false), (.http(status: 404, retryAfter: nil), false),
            (.http(status: 412, retryAfter: nil), false),
            (.s3(status: 503, code: "SlowDown", retryAfter: nil), true),
            (.s3(status: 200, code: "InternalError", retryAfter: nil), true),
            (.s3(status: 400, code: "RequestTimeout", retryAfter: nil), true),
            (.s3(status: 409, code: "OperationAborted", retryAfter: nil), true),
            (.s3(status: 500, code: "HTTP 500", retryAfter: nil), true),
            (.s3(status: 501, code: "NotImplemented", retryAfter: nil), false),
            (.s3(status: 403, code: "AccessDenied", retryAfter: nil), false),
            (.s3(status: 404, code: "NoSuchKey", retryAfter: nil), false),
            (.s3(status: 200, code: "MalformedXML", retryAfter: nil), false),
            (.transport(.reset), true), (.transport(.timeout), true), (.transport(.protocolError), true),
            (.transport(.tls), false), (.transport(.redirectRefused), false), (.transport(.unsupported), false),
            (.local, false), (.restart, true),
        ]
        for (failure, retryable) in table {
            XCTAssertEqual(failure.isRetryable, retryable, "\(failure)")
            if case .retry = policy.decide(failure, attempt: 1, random: 0.5) {
                XCTAssertTrue(retryable, "\(failure) retried")
            } else {
                XCTAssertFalse(retryable, "\(failure) not retried")
            }
        }
        // Retry-After counts for S3's throttling as for HTTP's.
        XCTAssertEqual(policy.decide(.s3(status: 503, code: "SlowDown", retryAfter: .seconds(7)), attempt: 1), .retry(after: 7))
    }

    func testGivesUpAfterMaxAttempts() {
        XCTAssertEqual(policy.decide(.transport(.reset), attempt: 4, random: 0.5), .retry(after: 8))
        XCTAssertEqual(policy.decide(.transport(.reset), attempt: 5, random: 0.5), .giveUp(reason: "gave up after 5 attempts"))
    }

    func testProgressResumesAfterAShortJitteredPause() {
        // Every failed attempt backs off, even one that moved the job forward: 0.1 s ± 20 %.
        for (random, expected) in [(0.5, 0.1), (0, 0.08), (0.999999, 0.12)] {
            guard case .retry(let delay) = policy.decide(.transport(.truncated), attempt: 1, madeProgress: true, random: random) else {
                return XCTFail("expected a retry")
            }
            XCTAssertEqual(delay, expected, accuracy: 0.0001)
        }
    }

    func testRetryAfterSecondsAndDate() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        XCTAssertEqual(policy.decide(.http(status: 429, retryAfter: .seconds(2)), attempt: 1, now: now), .retry(after: 2))
        let later = RetryAfter.date(now.addingTimeInterval(7))
        XCTAssertEqual(policy.decide(.http(status: 503, retryAfter: later), attempt: 1, now: now), .retry(after: 7))
        // Retry-After wins even when the attempt made progress.
        XCTAssertEqual(policy.decide(.http(status: 503, retryAfter: .seconds(3)), attempt: 1, madeProgress: true, now: now),
                       .retry(after: 3))
        if case .retry = policy.decide(.http(status: 503, retryAfter: .seconds(3600)), attempt: 1, now: now) {
            XCTFail("an hour is more than the 600 s allowed")
        }
    }

    func testRetryAfterParsing() {
        XCTAssertEqual(RetryAfter(header: "120"), .seconds(120))
        XCTAssertEqual(RetryAfter(header: " 0 "), .seconds(0))
        XCTAssertNil(RetryAfter(header: "-5"))
        XCTAssertNil(RetryAfter(header: "soon"))
        let date = RetryAfter(header: "Wed, 21 Oct 2015 07:28:00 GMT")
        XCTAssertEqual(date, .date(Date(timeIntervalSince1970: 1_445_412_480)))
        XCTAssertEqual(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"), Date(timeIntervalSince1970: 784_111_777))
        XCTAssertEqual(HTTPDate.parse("Sun Nov  6 08:49:37 1994"), Date(timeIntervalSince1970: 784_111_777))
        XCTAssertEqual(HTTPDate.format(Date(timeIntervalSince1970: 784_111_777)), "Sun, 06 Nov 1994 08:49:37 GMT")
    }

    /// The byte-by-byte IMF-fixdate reader agrees with timegm (the general parser) on every
    /// date it takes, leap days, month ends and years far from 1970 included.
    func testExactIMFFixdateMatchesTimegm() {
        func viaTimegm(_ year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int) -> Int64 {
            var fields = tm()
            fields.tm_year = Int32(year - 1900)
            fields.tm_mon = Int32(month)
            fields.tm_mday = Int32(day)
            fields.tm_hour = Int32(hour)
            fields.tm_min = Int32(minute)
            fields.tm_sec = Int32(second)
            return Int64(timegm(&fields))
        }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        var generator = SystemRandomNumberGenerator()
        var cases: [(Int, Int, Int, Int, Int, Int)] = [(1970, 0, 1, 0, 0, 0), (2000, 1, 29, 23, 59, 60), (1900, 1, 29, 0, 0, 0),
                                                       (2024, 1, 29, 12, 0, 0), (1969, 11, 31, 23, 59, 59), (9999, 11, 31, 23, 59, 59),
                                                       (0, 0, 1, 0, 0, 0), (2026, 3, 31, 1, 2, 3)]
        for _ in 0..<2000 {
            cases.append((Int.random(in: 0...9999, using: &generator), Int.random(in: 0...11, using: &generator),
                          Int.random(in: 1...31, using: &generator), Int.random(in: 0...23, using: &generator),
                          Int.random(in: 0...59, using: &generator), Int.random(in: 0...60, using: &generator)))
        }
        for (year, month, day, hour, minute, second) in cases {
            let text = String(format: "Mon, %02d %@ %04d %02d:%02d:%02d GMT", day, months[month], year, hour, minute, second)
            XCTAssertEqual(HTTPDate.exactIMFFixdate(Array(text.utf8)), viaTimegm(year, month, day, hour, minute, second), text)
        }
        for bad in ["Mon, 6 Nov 1994 08:49:37 GMT", "Mon, 06 Nov 1994 08:49:37 UTC", "Mon, 06 Foo 1994 08:49:37 GMT",
                    "Mon, 32 Nov 1994 08:49:37 GMT", "Mon, 06 Nov 1994 24:49:37 GMT", "Mon, 06 Nov 19x4 08:49:37 GMT",
                    "Mon, 00 Nov 1994 08:49:37 GMT", "Mon, 06 Nov 1994 08:60:37 GMT", "Mon, 06 Nov 1994 08:49:61 GMT"] {
            XCTAssertNil(HTTPDate.exactIMFFixdate(Array(bad.utf8)), bad)
        }
    }

    /// The hand-written IMF-fixdate writer says what a DateFormatter says for times from
    /// 1582-10-15 to 9999-12-31, before 1970 included, and reads back through the parser to the
    /// same second; before 1582 (where DateFormatter's calendar is Julian) it is proleptic
    /// Gregorian, as the parser is, and still reads back to the same second.
    func testIMFFixdateMatchesDateFormatter() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var generator = SystemRandomNumberGenerator()
        // 1582-10-15 (the first Gregorian day) to 9999-12-31.
        var seconds: [Int64] = [0, -1, 784_111_777, 951_782_400, 253_402_300_799, -12_219_292_800]
        for _ in 0..<2000 { seconds.append(Int64.random(in: -12_219_292_800...253_402_300_799, using: &generator)) }
        for value in seconds {
            let text = HTTPDate.imfFixdate(seconds: value)
            XCTAssertEqual(text, formatter.string(from: Date(timeIntervalSince1970: TimeInterval(value))), "\(value)")
            XCTAssertEqual(text.flatMap(HTTPDate.parse), Date(timeIntervalSince1970: TimeInterval(value)), "\(value)")
        }
        for value: Int64 in [-62_135_596_800, -30_000_000_000, -12_219_292_801] {  // 0001-01-01, 1019, 1582-10-14
            let text = HTTPDate.imfFixdate(seconds: value)
            XCTAssertEqual(text.flatMap(HTTPDate.parse), Date(timeIntervalSince1970: TimeInterval(value)), text ?? "\(value)")
        }
        XCTAssertEqual(HTTPDate.imfFixdate(seconds: -62_135_596_800), "Mon, 01 Jan 0001 00:00:00 GMT")
        XCTAssertNil(HTTPDate.imfFixdate(seconds: 253_402_300_800), "year 10000 has no four-digit form")
        XCTAssertEqual(HTTPDate.format(Date(timeIntervalSince1970: 784_111_777.9)), "Sun, 06 Nov 1994 08:49:37 GMT")
    }
}
