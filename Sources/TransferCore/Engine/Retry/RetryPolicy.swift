import Foundation

/// When and how long to wait before trying an exchange again. A pure value:
/// it looks at a failure and the attempt count and returns a decision.
///
/// Defaults (base 1 s, factor 2, cap 30 s, ±20 % jitter, 5 attempts):
///
/// | failed attempt | delay before the next |
/// |---|---|
/// | 1 | 1 s ± 0.2 |
/// | 2 | 2 s ± 0.4 |
/// | 3 | 4 s ± 0.8 |
/// | 4 | 8 s ± 1.6 |
/// | 5 | give up |
///
/// A `Retry-After` from the server (seconds or HTTP-date) replaces the computed
/// delay, up to `maxRetryAfter`; asking for longer fails with the server's wish
/// in the message.
///
/// Progress means new bytes beyond the furthest offset the job ever reached
/// (bytes fetched again after a server that cannot resume are no progress).
/// An attempt that made progress resets the count and waits `progressDelay`
/// (0.1 s ± jitter): a connection that drops every few MiB still finishes,
/// without hammering the server. Every other failed attempt uses one up and
/// backs off as in the table, whatever its cause, so a server that never lets
/// a job progress fails it after `maxAttempts` attempts.
public struct RetryPolicy: Sendable, Equatable {
    public var maxAttempts: Int
    public var baseDelay: TimeInterval
    public var multiplier: Double
    public var maxDelay: TimeInterval
    /// Fraction of the delay added or removed at random.
    public var jitter: Double
    public var maxRetryAfter: TimeInterval
    /// The pause after an attempt that made progress (jittered like the others).
    public var progressDelay: TimeInterval = 0.1

    public static let `default` = RetryPolicy()

    public init(maxAttempts: Int = 5, baseDelay: TimeInterval = 1, multiplier: Double = 2,
                maxDelay: TimeInterval = 30, jitter: Double = 0.2, maxRetryAfter: TimeInterval = 600) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.multiplier = multiplier
        self.maxDelay = maxDelay
        self.jitter = jitter
        self.maxRetryAfter = maxRetryAfter
    }

    package enum Decision: Equatable, Sendable {
        case retry(after: TimeInterval)
        case giveUp(reason: String)
    }

    /// - Parameters:
    ///   - failure: what went wrong.
    ///   - attempt: how many attempts without progress have failed so far, this one included (1-based).
    ///   - madeProgress: whether this attempt reached bytes beyond the furthest offset before it.
    ///   - random: a value in 0..<1 for the jitter (injected for tests).
    package func decide(_ failure: Failure, attempt: Int, madeProgress: Bool = false, now: Date = Date(),
                       random: Double = Double.random(in: 0..<1)) -> Decision {
        switch failure.retryability {
        case .never(let reason):
            return .giveUp(reason: reason)
        case .immediately:
            return .retry(after: 0)
        case .withBackoff(let retryAfter):
            if madeProgress && retryAfter == nil {
                return .retry(after: progressDelay * (1 + jitter * (random * 2 - 1)))
            }
            guard attempt < maxAttempts else {
                return .giveUp(reason: "gave up after \(attempt) attempt\(attempt == 1 ? "" : "s")")
            }
            if let retryAfter {
                let wait = retryAfter.delay(from: now)
                guard wait <= maxRetryAfter else {
                    // Not Int(wait): a Retry-After near Int.max seconds is past Int's range as a Double.
                    let asked = String(format: "%.0f", wait.rounded(.down))
                    return .giveUp(reason: "the server asked to retry in \(asked) s, more than the \(Int(maxRetryAfter)) s allowed")
                }
                return .retry(after: max(0, wait))
            }
            return .retry(after: backoff(attempt: attempt, random: random))
        }
    }

    /// The delay after `attempt` failures, with jitter: base × factor^(attempt-1), capped.
    package func backoff(attempt: Int, random: Double) -> TimeInterval {
        let raw = min(maxDelay, baseDelay * pow(multiplier, Double(max(0, attempt - 1))))
        let spread = raw * jitter * (random * 2 - 1)
        return max(0, min(maxDelay, raw + spread))
    }
}

extension RetryPolicy {
    /// A failure as the policy sees it. `retryability` is the one place that says whether a
    /// failure is worth another attempt: every engine, the S3 client and the queue ask it.
    ///
    /// | failure | decision |
    /// |---|---|
    /// | network: DNS, connect, reset, timeout, truncated body, protocol error | retry with backoff |
    /// | TLS, too many redirects, a refused redirect, an unsupported feature, cancelled | never |
    /// | HTTP 408, 425, 429, and 5xx | retry with backoff, `Retry-After` honoured |
    /// | HTTP 501, 505, 506, 508, 510, 511 (the server cannot do it, whenever asked) | never |
    /// | other HTTP statuses | never |
    /// | S3 error codes of a busy or failing service (`SlowDown`, `InternalError`, `RequestTimeout`, …) | retry, whatever the status (S3 can answer 200 with one) |
    /// | other S3 error codes | as their HTTP status |
    /// | local file errors | never |
    /// | the remote changed | at once |
    package enum Failure: Sendable, Equatable {
        case transport(TransportError.Kind)
        case http(status: Int, retryAfter: RetryAfter?)
        /// An S3 error document's code with the status it came with (200 for an error inside a
        /// CompleteMultipartUpload answer).
        case s3(status: Int, code: String, retryAfter: RetryAfter?)
        /// Local disk or file problem: retrying will not help.
        case local
        /// The remote content changed or the server ignored a range: start over at once.
        case restart

        enum Retryability: Equatable {
            case never(String)
            case immediately
            case withBackoff(RetryAfter?)
        }

        /// Whether another attempt may succeed.
        package var isRetryable: Bool {
            if case .never = retryability { return false }
            return true
        }

        /// HTTP statuses that say the server cannot do what was asked, however often it is asked.
        static let permanentServerStatuses: Set<Int> = [501, 505, 506, 508, 510, 511]

        /// S3 error codes of a service that is busy or failed this once (AWS's retry guidance).
        static let transientS3Codes: Set<String> = [
            "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "OperationAborted", "Throttling",
            "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestLimitExceeded",
            "BandwidthLimitExceeded", "TooManyRequestsException", "PriorRequestNotComplete", "InternalFailure",
        ]

        var retryability: Retryability {
            switch self {
            case .transport(let kind):
                switch kind {
                case .dns, .connect, .reset, .timeout, .truncated, .protocolError, .other:
                    return .withBackoff(nil)
                case .tls:
                    return .never("TLS failure")
                case .tooManyRedirects:
                    return .never("too many redirects")
                case .redirectRefused:
                    return .never("redirect refused")
                case .cancelled:
                    return .never("cancelled")
                case .unsupported:
                    return .never("not supported by this transport")
                }
            case .http(let status, let retryAfter):
                if Self.permanentServerStatuses.contains(status) {
                    return .never("HTTP \(status): the server cannot do this, however often asked")
                }
                if status == 408 || status == 425 || status == 429 || (500...599).contains(status) {
                    return .withBackoff(retryAfter)
                }
                return .never("HTTP \(status)")
            case .s3(let status, let code, let retryAfter):
                if Self.transientS3Codes.contains(code) { return .withBackoff(retryAfter) }
                if case .never(let reason) = Failure.http(status: status, retryAfter: retryAfter).retryability {
                    return .never(status == 200 ? "S3 \(code)" : "\(reason) (S3 \(code))")
                }
                return .withBackoff(retryAfter)
            case .local:
                return .never("local file error")
            case .restart:
                return .immediately
            }
        }
    }
}

/// A parsed `Retry-After` header: delay seconds or an HTTP-date.
package enum RetryAfter: Sendable, Equatable {
    case seconds(TimeInterval)
    case date(Date)

    package init?(header: String) {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(trimmed), seconds >= 0 {
            self = .seconds(TimeInterval(seconds))
        } else if let date = HTTPDate.parse(trimmed) {
            self = .date(date)
        } else {
            return nil
        }
    }

    package func delay(from now: Date) -> TimeInterval {
        switch self {
        case .seconds(let seconds): return seconds
        case .date(let date): return max(0, date.timeIntervalSince(now))
        }
    }
}

/// HTTP-date parsing and formatting (RFC 9110: IMF-fixdate, plus the two obsolete forms).
package enum HTTPDate {
    private static let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]

    /// Formatters are costly to make: one set, used under a lock.
    private static let formatters = Locked<[String: DateFormatter]>([:])

    private static func withFormatter<R>(_ format: String, _ body: (DateFormatter) -> R) -> R {
        formatters.withLock { cache in
            let formatter = cache[format] ?? {
                let made = DateFormatter()
                made.locale = Locale(identifier: "en_US_POSIX")
                made.timeZone = TimeZone(identifier: "GMT")
                made.dateFormat = format
                cache[format] = made
                return made
            }()
            return body(formatter)
        }
    }

    package static func parse(_ text: String) -> Date? {
        // An HTTP-date is ASCII. Foundation's DateFormatter traps on a date followed
        // by a combining mark ("… GMT\u{301}": its parsed range ends inside a Character).
        guard text.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
        if let date = parseIMFFixdate(text) { return date }
        for format in formats {
            if let date = withFormatter(format, { $0.date(from: text) }) { return date }
        }
        return nil
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]

    /// `seconds` since 1970 as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), without a
    /// formatter (each saved file's record asks: `RecordedValidators`); nil for a time
    /// without a four-digit year.
    static func imfFixdate(seconds: Int64) -> String? {
        var time = time_t(seconds)
        var fields = tm()
        guard gmtime_r(&time, &fields) != nil, (0...9999).contains(Int(fields.tm_year) + 1900) else { return nil }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = String(Int(fields.tm_year) + 1900)
        return "\(weekdays[Int(fields.tm_wday)]), \(two(fields.tm_mday)) \(months[Int(fields.tm_mon)]) "
            + String(repeating: "0", count: 4 - year.count) + year
            + " \(two(fields.tm_hour)):\(two(fields.tm_min)):\(two(fields.tm_sec)) GMT"
    }

    /// The one format servers send today (`Sun, 06 Nov 1994 08:49:37 GMT`), parsed
    /// without a formatter: it is on the path of every download.
    static func parseIMFFixdate(_ text: String) -> Date? {
        if let seconds = exactIMFFixdate(Array(text.utf8)) { return Date(timeIntervalSince1970: TimeInterval(seconds)) }
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT",
              let day = Int(parts[1]), let monthIndex = months.firstIndex(of: String(parts[2])), let year = Int(parts[3]) else {
            return nil
        }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second),
              (0...9999).contains(year) else {  // four digits; a longer year would trap in Int32(year - 1900)
            return nil
        }
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(monthIndex)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_sec = Int32(second)
        return Date(timeIntervalSince1970: TimeInterval(timegm(&fields)))
    }

    /// Seconds since 1970 for exactly `Sun, 06 Nov 1994 08:49:37 GMT` (29 bytes, two-digit
    /// day), read byte by byte; anything else is left to the general parser.
    static func exactIMFFixdate(_ b: [UInt8]) -> Int64? {
        guard b.count == 29, b[3] == UInt8(ascii: ","), b[4] == 0x20, b[7] == 0x20, b[11] == 0x20, b[16] == 0x20,
              b[19] == UInt8(ascii: ":"), b[22] == UInt8(ascii: ":"), b[25] == 0x20,
              b[26] == UInt8(ascii: "G"), b[27] == UInt8(ascii: "M"), b[28] == UInt8(ascii: "T") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                value = value * 10 + Int(b[i] - 0x30)
            }
            return value
        }
        let monthName = String(decoding: b[8..<11], as: UTF8.self)
        guard let day = number(5..<7), let year = number(12..<16), let hour = number(17..<19),
              let minute = number(20..<22), let second = number(23..<25),
              let month = months.firstIndex(of: monthName),
              (1...31).contains(day), hour <= 23, minute <= 59, second <= 60 else { return nil }
        // Days from 1970-01-01 to the civil date (proleptic Gregorian), as timegm counts them.
        let y = month < 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let m = month + 1
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    package static func format(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        if abs(seconds) < 1e15, let text = imfFixdate(seconds: Int64(seconds)) { return text }
        return withFormatter("EEE, dd MMM yyyy HH:mm:ss 'GMT'") { $0.string(from: date) }
    }
}
