// libFuzzer entry points for the parsers of outside input. Not a SwiftPM
// target: scripts/fuzz compiles this file together with every source file of
// Sources/TransferCore into one module (so internal APIs are reachable) and
// one binary; TRANSFERD_FUZZ_TARGET selects the target when it starts.
//
// A target feeds the input to the parser exactly as transferd does with the
// bytes it reads (job files, response bodies, header lines) and checks the
// properties the code promises. A Swift trap (overflow, bad index, failed
// precondition) or a failed check below is a crash to libFuzzer.
import Foundation

enum FuzzTarget: String, CaseIterable {
    /// A job file named `f.json`: JSONParser, then JobFileParser's validation.
    case jobJSON = "job-json"
    /// A job file named `f.urls`: one `URL [DEST_DIR]` per line; read whole and, as a list too
    /// large to read whole is, a piece at a time (`LargeURLList`), which must agree.
    case jobURLs = "job-urls"
    /// An S3 response body: S3XMLElement as S3Client and UploadEngine read it.
    case s3XML = "s3-xml"
    /// Raw response header lines as libcurl hands them over.
    case headers
    /// One header value: Content-Range, Retry-After, HTTP-date.
    case headerValue = "header-value"
    /// A size such as `10M` (limit_rate, part_size, --limit-rate).
    case byteSize = "bytesize"
    /// A control API's event stream as `status --watch --remote` reads it: the SSE parser
    /// (fed whole and in pieces: the same events either way), each event's JSON, the view;
    /// and the ids and cursors the API takes from clients.
    case eventStream = "event-stream"
    /// A partial file's record of how far it is written (an extended attribute anyone who can
    /// write the file can set): WrittenOffsets, and what it may add to a checkpoint.
    case writtenOffsets = "written-offsets"
    /// A download's checkpoint (`NAME.part.state`, or a job row's JSON) as the engine reads it:
    /// decoded, trusted only when coherent, then every sum a resume makes from it.
    case checkpoint
    /// A download's request, what it knew and the server's answer head: `ResponseDecision`,
    /// the one judgement of whether (and where) an answer's bytes may be written.
    case responseDecision = "response-decision"
    /// A recorded file's validators and the answer to the conditional HEAD of `--skip-unchanged`:
    /// `RecordedValidators.answerSaysUnchanged`.
    case conditional
    /// Any text shown as a URL or an error message: `Redaction.url(string:)` and
    /// `Redaction.message`, with a registered secret, a password in user info and the
    /// value of a secret-named parameter planted around the input.
    case redaction
    /// A published SHA256SUMS list a job names (`checksums`): `ChecksumList`.
    case checksumList = "checksum-list"
    /// A tus server's answer head: `TusHeaders` (Upload-Offset, the comma lists), `TusServerInfo`
    /// (OPTIONS), `TusResumeDecision` (HEAD after a resume, a PATCH's new offset).
    case tusHeaders = "tus-headers"
    /// A resumable-upload server's answer head (the IETF draft): `ResumableHeaders` (Upload-Offset,
    /// Upload-Length, Upload-Complete, Location), `UploadLimits.parse` (Upload-Limit) and the split
    /// it makes, `InterimAnnouncement` (a 104), `ResumableResumeDecision` and `ResumableAnswer`.
    case resumableHeaders = "resumable-headers"
    /// What an AWS credential source answers: a credential_process's JSON or the container /
    /// instance metadata endpoints' (`AWSCredentialDocument`), an STS answer (`STSRequest.credentials`),
    /// and a credential_process command line split into arguments (`CredentialProcess.arguments`).
    case awsCredentials = "aws-credentials"
    /// A metalink document (Metalink 4 `.meta4` or Metalink 3 `.metalink`): `Metalink.parse`.
    case metalink

    func run(_ data: Data) {
        switch self {
        case .jobJSON: fuzzJobFile(name: "f.json", data)
        case .jobURLs:
            fuzzJobFile(name: "f.urls", data)
            fuzzLargeList(data)
        case .s3XML: fuzzS3XML(data)
        case .headers: fuzzHeaders(data)
        case .headerValue: fuzzHeaderValue(data)
        case .byteSize: fuzzByteSize(data)
        case .eventStream: fuzzEventStream(data)
        case .writtenOffsets: fuzzWrittenOffsets(data)
        case .checkpoint: fuzzCheckpoint(data)
        case .responseDecision: fuzzResponseDecision(data)
        case .conditional: fuzzConditional(data)
        case .redaction: fuzzRedaction(data)
        case .checksumList: fuzzChecksumList(data)
        case .tusHeaders: fuzzTusHeaders(data)
        case .resumableHeaders: fuzzResumableHeaders(data)
        case .awsCredentials: fuzzAWSCredentials(data)
        case .metalink: fuzzMetalink(data)
        }
    }
}

// nonisolated(unsafe): set once by LLVMFuzzerInitialize, before libFuzzer runs any input on the same thread.
nonisolated(unsafe) private var selectedTarget: FuzzTarget?

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>,
                           _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: " ")
    guard let name = ProcessInfo.processInfo.environment["TRANSFERD_FUZZ_TARGET"] else {
        FileHandle.standardError.write(Data("set TRANSFERD_FUZZ_TARGET to one of: \(names)\n".utf8))
        _exit(2)  // not exit: LeakSanitizer would report the allocations so far
    }
    guard let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("unknown TRANSFERD_FUZZ_TARGET \"\(name)\"; the targets are: \(names)\n".utf8))
        _exit(2)  // not exit: LeakSanitizer would report the allocations so far
    }
    selectedTarget = target
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    selectedTarget!.run(Data(bytes: bytes, count: size))
    return 0
}

/// A broken promise: a crash for libFuzzer, with the reason on stderr.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
           file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("fuzz check failed: \(message())", file: file, line: line) }
}

// MARK: Job files

let fuzzRoot = "/tmp/root"

func fuzzJobFile(name: String, _ data: Data) {
    let parser = JobFileParser(root: fuzzRoot)
    switch parser.parse(name: name, data: data) {
    case .failure(let rejection):
        check(!rejection.errors.isEmpty, "a rejection without errors")
    case .success(let jobs):
        check(!jobs.isEmpty, "an accepted file without jobs")
        var ids: Set<String> = []
        for spec in jobs {
            check(ids.insert(spec.id).inserted, "the id \(spec.id) twice")
            // Every path a job touches lies inside the root.
            for path in [spec.destination, spec.source].compactMap({ $0 }) + (spec.files ?? []).map(\.path) {
                check(path == fuzzRoot || path.hasPrefix(fuzzRoot + "/"), "\(path) is outside the root")
            }
            if spec.kind == .download { check(spec.destination != nil, "a download without a destination") }
            _ = spec.host
            // The queue stores the spec as JSON and reads it back on every claim.
            do {
                let stored = try JobSpec(stored: spec.storedJSON)
                check(stored == spec, "the stored form reads back different: \(spec.storedJSON)")
            } catch {
                check(false, "the stored form does not read back (\(error)): \(spec.storedJSON)")
            }
        }
    }
}

/// The file a list is written to for `LargeURLList`, which reads a descriptor.
private let largeListPath: String = {
    let path = NSTemporaryDirectory() + "/transferd-fuzz-list-\(getpid()).urls"
    atexit { unlink(NSTemporaryDirectory() + "/transferd-fuzz-list-\(getpid()).urls") }
    return path
}()

/// The list read a piece at a time (pieces of 1 to 16 bytes, from the input's length) gives
/// the jobs the list read whole gives, and is refused when that is; for text both refuse, the
/// same mistakes.
func fuzzLargeList(_ data: Data) {
    let parser = JobFileParser(root: fuzzRoot)
    let whole = parser.parse(name: "f.urls", data: data)
    let path = largeListPath
    do { try data.write(to: URL(fileURLWithPath: path)) } catch { check(false, "cannot write \(path): \(error)") }
    let pieces = Result { () throws(JobFileRejection) -> [JobSpec] in
        let list = try LargeURLList(name: "f.urls", descriptor: open(path, O_RDONLY | O_CLOEXEC), parser: parser,
                                    pieceSize: 1 + data.count % 16)
        var jobs: [JobSpec] = []
        do {
            try list.forEachBatch(of: 7) { jobs += $0 }
        } catch let rejection as JobFileRejection {
            throw rejection
        } catch {
            check(false, "not a rejection: \(error)")
        }
        check(list.jobCount == jobs.count, "\(list.jobCount) job lines counted, \(jobs.count) jobs read")
        return jobs
    }
    switch (whole, pieces) {
    case (.success(let a), .success(let b)):
        check(a == b, "the jobs differ read whole and in pieces")
    case (.failure(let a), .failure(let b)):
        // Text the whole-file reader takes as text: the same mistakes, in the same words.
        let text = String(data: data, encoding: .utf8)
        if let text, !text.utf8.contains(0), !text.allSatisfy(\.isWhitespace) {
            check(a.errors == b.errors, "the mistakes differ read whole and in pieces:\n\(a)\n--\n\(b)")
        }
    case (.success, .failure(let b)):
        check(false, "taken whole, refused in pieces: \(b)")
    case (.failure(let a), .success):
        check(false, "refused whole, taken in pieces: \(a)")
    }
}

// MARK: S3 response bodies

/// The element names transferd reads from S3's answers.
func fuzzS3XML(_ data: Data) {
    // S3Client.send: the body, up to 1 MiB, decoded leniently, read by S3XMLElement.
    let body = String(decoding: data, as: UTF8.self)
    if let root = S3XMLElement.parse(body) {
        _ = root.value("UploadId")
        // S3Client.listParts, one page.
        for part in root.children("Part") {
            guard let number = part.value("PartNumber").flatMap(Int.init), let etag = part.value("ETag"),
                  let size = part.value("Size").flatMap(Int64.init) else { continue }
            _ = S3Client.ListedPart(number: number, etag: etag, size: size)
            // completeMultipartUpload sends the ETags back escaped; the server must read what was listed.
            // (XML normalises line ends and cannot carry other control characters: those are left out.)
            if !etag.unicodeScalars.contains(where: { $0.value < 0x20 }) {
                let echoed = S3XMLElement.parse("<ETag>\(XMLText.escape(etag))</ETag>")?.text
                check(echoed == etag, "escape/parse does not round-trip \(etag.debugDescription)")
            }
        }
        _ = root.value("IsTruncated") == "true"
        _ = root.value("NextPartNumberMarker").flatMap(Int.init)
    }
    // S3Client.listObjects: one ListObjectsV2 page, and where each key would go below a folder.
    if let page = try? S3ListPage.parse(body) {
        for object in page.objects {
            if case .file(let relative) = S3PrefixPlan.placement(key: object.key, prefix: "") {
                let segments = relative.split(separator: "/", omittingEmptySubsequences: false)
                check(!relative.hasPrefix("/") && !segments.contains("..") && !segments.contains("") && !relative.utf8.contains(0),
                      "placement let \(relative.debugDescription) out of the folder")
            }
        }
    }
    // S3Client.openUploads: one ListMultipartUploads page.
    if let page = try? S3OpenUploadsPage.parse(body) {
        check(page.uploads.allSatisfy { !$0.uploadID.isEmpty }, "an upload without an id")
    }
    // completeMultipartUpload: an error document in a 200 answer.
    _ = S3ErrorDocument(body)
    // UploadEngine's one-line summary of an error body.
    let summary = ServerMessage.summary(data)
    check(summary.count <= 300, "a summary of \(summary.count) characters")
}

// MARK: Response headers

let fuzzNow = Date(timeIntervalSince1970: 1_750_000_000)

/// A response head as libcurl hands it over, line by line, through what DownloadSink,
/// DownloadEngine and S3Client read from it.
func fuzzHeaders(_ data: Data) {
    // CurlExchange.handleHeader: one callback per line, a status line starts a new response.
    var lines: [String] = []
    for raw in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
        let line = HTTPHeaders.trimmed(Substring(String(decoding: raw, as: UTF8.self)))
        if line.hasPrefix("HTTP/") { lines = [] } else if !line.isEmpty { lines.append(line) }
    }
    let headers = HTTPHeaders(lines.compactMap(HTTPHeaders.parseLine))
    for (name, _) in headers {
        check(!name.isEmpty && !name.contains(" ") && !name.contains(":"), "the header name \(name.debugDescription)")
        check(headers[name] != nil, "\(name) does not look itself up")
    }
    // The checksum the server publishes (Repr-Digest, Content-Digest, Digest, x-amz-checksum-*).
    for status in [200, 206] {
        if let published = PublishedChecksum.from(status: status, headers: headers) {
            check(published.value.count == published.algorithm.length, "a published \(published.algorithm) of \(published.value.count) bytes")
            _ = PublishedChecksum.shown(published.value, published.algorithm)
        }
    }
    _ = PublishedChecksum.unchecked(headers: headers)
    // DownloadSink.receive(head:), without the file.
    let validators = ResponseValidators(headers: headers)
    _ = validators.ifRangeValue
    _ = validators.matches(ResponseValidators(etag: "\"abc\"", lastModified: "Sun, 06 Nov 1994 08:49:37 GMT"))
    let length = headers["Content-Length"].flatMap(Int64.init)
    _ = headers["Accept-Ranges"].map { $0.lowercased().split(separator: ",").contains { HTTPHeaders.trimmed($0) == "bytes" } }
    let range = headers["Content-Range"].flatMap(ContentRange.init(header:))
    if let range { checkContentRange(range) }
    if let complete = range?.completeLength ?? length {
        var plan = SegmentPlan.single(totalSize: nil)
        plan.learnTotalSize(complete)
        plan.splitRemainder(connections: 8, minSegmentSize: 1 << 20)
        _ = plan.splitLargestRemainder(minSegmentSize: 1 << 20)
        _ = plan.isComplete
    }
    // DownloadEngine: skip-if-identical compares Last-Modified.
    _ = headers["Last-Modified"].flatMap(HTTPDate.parse)
    // S3Client.send: a throttled answer's Retry-After.
    if let retryAfter = headers["Retry-After"].flatMap(RetryAfter.init(header:)) { checkRetryAfter(retryAfter) }
}

/// One header value (the whole input) through every value parser.
func fuzzHeaderValue(_ data: Data) {
    let value = String(decoding: data, as: UTF8.self)
    if let range = ContentRange(header: value) { checkContentRange(range) }
    if let retryAfter = RetryAfter(header: value) { checkRetryAfter(retryAfter) }
    if let date = HTTPDate.parse(value) { _ = HTTPDate.format(date) }
}

func checkContentRange(_ range: ContentRange) {
    check(range.first <= range.last, "\(range): first > last")
    check(range.completeLength.map { $0 > range.last } ?? true, "\(range): the length is not past the last byte")
    // DownloadSink compares Content-Length with last - first + 1: the count must be an Int64.
    let count = range.last.subtractingReportingOverflow(range.first)
    check(!count.overflow && !count.partialValue.addingReportingOverflow(1).overflow, "\(range): its byte count overflows Int64")
}

func checkRetryAfter(_ retryAfter: RetryAfter) {
    check(retryAfter.delay(from: fuzzNow) >= 0, "\(retryAfter): a negative delay")
    for status in [429, 503] {
        _ = RetryPolicy.default.decide(.http(status: status, retryAfter: retryAfter), attempt: 1, now: fuzzNow, random: 0.5)
    }
}

// MARK: Sizes

func fuzzByteSize(_ data: Data) {
    let text = String(decoding: data, as: UTF8.self)
    if let bytes = ByteSize.parse(text) {
        check(bytes >= 0, "\(text.debugDescription) is \(bytes) bytes")
    }
}

func fuzzWrittenOffsets(_ data: Data) {
    guard let record = WrittenOffsets(encoded: String(decoding: data, as: UTF8.self)) else { return }
    check(WrittenOffsets(encoded: record.encoded) == record, "the record does not survive its own text")
    // A checkpoint's plan made from the input's own numbers: each segment ends at half its claim.
    let segments = record.segments.map { SegmentPlan.Segment(start: $0.start, end: $0.start + $0.written / 2, written: $0.written / 4) }
    let plan = SegmentPlan(segments: segments, totalSize: nil)
    let fileSize = Int64(data.count) * 1000
    let extended = record.extending(plan, id: record.id, bootID: record.bootID, fileSize: fileSize)
    check(extended.segments.count == plan.segments.count, "the record added or removed segments")
    for (before, after) in zip(plan.segments, extended.segments) {
        check(after.start == before.start && after.end == before.end, "a segment moved")
        check(after.written >= before.written, "written bytes taken away")
        check(after.written == before.written || (after.offset <= after.end! && after.offset <= fileSize),
              "claimed \(after.written) bytes from \(after.start), past the segment's end or the file's \(fileSize)")
    }
    check(record.extending(plan, id: record.id + "x", bootID: record.bootID, fileSize: fileSize) == plan, "another incarnation changed the plan")
}

func fuzzCheckpoint(_ data: Data) {
    guard let checkpoint = try? JSONDecoder().decode(DownloadCheckpoint.self, from: data), checkpoint.isCoherent else { return }
    // What a resume computes from a trusted checkpoint: none of it may trap.
    for trusted in [checkpoint.trusted(inBoot: "boot"), checkpoint.trusted(inBoot: nil), checkpoint.durableOnly] {
        check(trusted.isCoherent, "trusting a coherent checkpoint made an incoherent one")
        var plan = trusted.plan
        let extent = plan.writtenExtent
        check(plan.bytesWritten >= 0 && plan.bytesWritten <= max(extent, 0), "written \(plan.bytesWritten) past the extent \(extent)")
        if let total = plan.totalSize { check(extent <= total, "written past the total size") }
        for segment in plan.segments {
            _ = (segment.offset, segment.remaining, segment.isComplete)
        }
        _ = plan.isComplete
        _ = plan.hasSplittableRemainder(minSegmentSize: 1)
        let requests = Dictionary(uniqueKeysWithValues: plan.segments.indices.map {
            ($0, SegmentPlan.Request(end: plan.segments[$0].end ?? .max, from: plan.segments[$0].start, elapsed: 2))
        })
        if plan.splitLargestRemainder(minSegmentSize: 1, requests: requests) != nil {
            check(plan.isCoherent, "a split left a plan that does not tile the file")
        }
    }
}

func fuzzEventStream(_ data: Data) {
    var whole = ServerSentEventParser()
    let events = whole.feed(data)
    // The same bytes in pieces whose sizes come from the input: the same events.
    var pieces = ServerSentEventParser()
    var split: [ServerSentEvent] = []
    var index = data.startIndex
    var step = 1
    while index < data.endIndex {
        let end = data.index(index, offsetBy: min(step, data.endIndex - index))
        split += pieces.feed(data[index..<end])
        step = Int(data[index] % 7) + 1
        index = end
    }
    check(split == events || whole.overflowed, "chunking changed the events: \(events.count) whole, \(split.count) in pieces")
    check(whole.lastEventID == pieces.lastEventID || whole.overflowed, "chunking changed the last event id")
    let summary = Data(#"{"event_id":"r-0","jobs":{"running":1,"done":0}}"#.utf8)
    let jobs = Data(#"{"jobs":[{"id":"a","state":"running","kind":"download","url":"u","bytes_done":1}],"next":null}"#.utf8)
    guard var remote = try? RemoteRun(summary: summary, jobs: [jobs], at: Date(timeIntervalSince1970: 0)) else {
        return check(false, "the fixed snapshot does not read")
    }
    for (offset, event) in events.enumerated() {
        _ = remote.apply(event, at: Date(timeIntervalSince1970: Double(offset)))
        _ = EventID(parsing: event.lastEventID)
        _ = JobCursor(token: event.data)
    }
    check(remote.progress.running.allSatisfy { $0.bytesDone >= 0 }, "negative progress")
}


/// Input: a first line `OFFSET END SENT TOTAL SEGMENTED KNOWN_ETAG` (`-` for none; SENT and
/// SEGMENTED 0 or 1), a second line with the status, then header lines `Name: value`.
/// Whatever the answer, the verdict never takes a body that may be only the asked range as
/// the whole file, never writes outside what was asked, never splices two versions, and a
/// file is "complete" only at a length the answer or the known size said.
func fuzzResponseDecision(_ data: Data) {
    let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
    guard lines.count >= 2 else { return }
    let fields = lines[0].split(separator: " ").map(String.init)
    guard fields.count == 6, let offset = Int64(fields[0]), offset >= 0, let status = Int(lines[1]) else { return }
    let end = fields[1] == "-" ? nil : Int64(fields[1])
    guard fields[1] == "-" || (end.map { $0 > offset } ?? false) else { return }
    let total = fields[3] == "-" ? nil : Int64(fields[3])
    guard fields[3] == "-" || (total.map { $0 >= 0 } ?? false) else { return }
    var headers = HTTPHeaders()
    for line in lines.dropFirst(2) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.add(String(line[..<colon]), String(HTTPHeaders.trimmed(line[line.index(after: colon)...])))
    }
    let asked = ResponseDecision.Asked(offset: offset, end: end, sentRange: fields[2] == "1" || offset > 0 || end != nil)
    let knownTag = fields[5] == "-" ? nil : fields[5]
    let known = ResponseDecision.Known(totalSize: total, validators: ResponseValidators(etag: knownTag),
                                       segmented: fields[4] == "1")
    let answer = ResponseDecision.Answer(head: ResponseHead(status: status, headers: headers, url: URL(string: "http://h/f")!))
    let verdict = ResponseDecision.decide(asked: asked, known: known, answer: answer)
    switch verdict {
    case .range(let rangeEnd, let complete):
        check(rangeEnd > asked.offset, "a range that writes nothing or backwards: \(verdict)")
        check(asked.end.map { rangeEnd <= $0 } ?? true, "wrote past the asked end: \(verdict)")
        check(known.validators.matches(answer.validators), "spliced another version: \(verdict)")
        if let complete { check(rangeEnd <= complete, "a range past the file's end: \(verdict)") }
        if let complete, let total { check(complete == total, "took another size: \(verdict)") }
    case .whole(let size, _, _):
        check(size == answer.contentLength, "a size the answer did not give: \(verdict)")
        if asked.sentRange {
            check(!known.segmented, "a whole file in place of segments: \(verdict)")
            check(!ResponseDecision.mayBeTheRangeOnly(asked: asked, known: known, length: answer.contentLength),
                  "a body that may be only the range taken as the whole file: \(verdict)")
        }
    case .wholeUnlessItEndsAt(let span, _, _):
        check(asked.sentRange && asked.offset == 0 && asked.end == span && answer.contentLength == nil && !known.segmented,
              "a provisional whole file where the length or the offset decides: \(verdict)")
    case .nothingLeft(let size):
        check(size >= 0 && size <= asked.offset, "complete at a length not reached: \(verdict)")
        check(total.map { $0 == size } ?? true, "complete at another size than known: \(verdict)")
        check(asked.sentRange, "nothing left without a range asked: \(verdict)")
    case .withoutRange:
        check(asked.sentRange, "asked again without a range that was never sent: \(verdict)")
    case .restart, .refuse, .error:
        break
    }
}

/// Input: a line `SIZE RECORDED_ETAG RECORDED_LAST_MODIFIED` (`-` for none; the date with `_` for
/// spaces), a line with the status, then header lines. "Unchanged" is never said of an answer of
/// another size or another ETag, nor of a 2xx without a size.
func fuzzConditional(_ data: Data) {
    let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
    guard lines.count >= 2 else { return }
    let fields = lines[0].split(separator: " ").map(String.init)
    guard fields.count == 3, let size = Int64(fields[0]), size >= 0, let status = Int(lines[1]) else { return }
    let etag = fields[1] == "-" ? nil : fields[1]
    let lastModified = fields[2] == "-" ? nil : fields[2].replacingOccurrences(of: "_", with: " ")
    var headers = HTTPHeaders()
    for line in lines.dropFirst(2) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.add(String(line[..<colon]), String(HTTPHeaders.trimmed(line[line.index(after: colon)...])))
    }
    let recorded = RecordedValidators(etag: etag, lastModified: lastModified, size: size, modified: "0.0", source: "x")
    guard recorded.answerSaysUnchanged(status: status, headers: headers, localSize: size), status != 304 else { return }
    check((200..<300).contains(status), "unchanged on status \(status)")
    let length = headers["Content-Length"].flatMap(ResponseDecision.Answer.length)
    check(length == size, "unchanged with another or no size: \(String(describing: length)) for \(size)")
    let remote = ResponseValidators(headers: headers)
    if let etag, let other = remote.etag {
        let strip = { (tag: String) in tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag }
        check(strip(etag) == strip(other), "unchanged with another ETag: \(etag) and \(other)")
    }
    check((etag != nil && remote.etag != nil) || (lastModified != nil && lastModified == remote.lastModified),
          "unchanged with nothing compared")
}

// MARK: Redaction

let fuzzRegisteredSecret = "fuzz-registered-s3cr3t"
let fuzzPlanted = "PLANTEDs3cr3t"

func fuzzRedaction(_ data: Data) {
    Redaction.registerSecret(fuzzRegisteredSecret)
    let text = String(decoding: data, as: UTF8.self)
    for shown in [Redaction.url(string: text), Redaction.message(text)] {
        check(!shown.contains(fuzzRegisteredSecret), "a registered secret survives in \(shown.debugDescription)")
    }
    let once = Redaction.url(string: text)
    check(Redaction.url(string: once) == once, "not idempotent: \(once.debugDescription) -> \(Redaction.url(string: once).debugDescription)")
    let message = Redaction.message(text)
    check(Redaction.message(message) == message, "message is not idempotent: \(message.debugDescription)")
    // Not when the input holds the secret already, also once a variant below drops its `&`s
    // (`PLANTED&s3cr3t` would become the secret in a path, where no rule looks for one).
    // Compared as bytes: by Characters, a combining mark after the secret's last letter hides it
    // (`t` + U+0316 is one Character), though every byte of it is there.
    func holdsPlanted(_ candidate: String) -> Bool { Data(candidate.utf8).range(of: Data(fuzzPlanted.utf8)) != nil }
    guard !holdsPlanted(text), !holdsPlanted(text.replacingOccurrences(of: "&", with: "")) else { return }
    // The same secret planted where the rule must find it, with the input around it.
    let encoded = ("https://u:\(fuzzPlanted)@" + text).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    let planted = [
        "https://h.example/p?" + text + "&token=" + fuzzPlanted,
        "https://h.example/p?" + text + "&Client_Secret=" + fuzzPlanted + "&" + text,
        "https://user:" + fuzzPlanted + "@" + text,
        "https://h.example/p#" + text + "&access_token=" + fuzzPlanted,
        "https://h.example/?next=" + encoded,
        "https://h.example/?next=https://u:" + fuzzPlanted + "@" + text.replacingOccurrences(of: "&", with: ""),
    ]
    for url in planted {
        let shown = Redaction.url(string: url)
        check(!shown.contains(fuzzPlanted), "a secret survives: \(url.debugDescription) -> \(shown.debugDescription)")
        check(Redaction.url(string: shown) == shown, "not idempotent: \(shown.debugDescription)")
        let said = Redaction.message("failed (\(url))")
        // Free text is split into words at white space and quotes, scalar by scalar (as here: a
        // `<` with a combining mark is one Character but still splits): a URL cut that way is no
        // longer one URL, and what a cut leaves is redacted only as far as it still reads as one.
        let cut = url.unicodeScalars.contains(where: { $0.properties.isWhitespace || "\"'<>".unicodeScalars.contains($0) })
        check(!said.contains(fuzzPlanted) || cut, "a secret survives in a message: \(said.debugDescription)")
    }
    let escaped = TerminalText.escaped(text)
    check(!escaped.unicodeScalars.contains(where: TerminalText.mustEscape), "a control survives escaping: \(escaped.debugDescription)")
}

func fuzzChecksumList(_ data: Data) {
    let list = ChecksumList(String(decoding: data, as: UTF8.self))
    for (name, hex) in list.entries {
        check(!name.isEmpty && !name.hasPrefix("./"), "a listed name \(name.debugDescription)")
        check(hex.utf8.count == 64 && hex.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) },
              "a listed value \(hex.debugDescription)")
        check(list.sha256(for: name) == hex, "\(name.debugDescription) does not look itself up")
        check(!list.ambiguous.contains(name), "\(name.debugDescription) is both listed and ambiguous")
    }
    for name in list.ambiguous { check(list.sha256(for: name) == nil, "an ambiguous \(name.debugDescription) gives a value") }
}

// MARK: tus

/// Input: `CONFIRMED SIZE OFFSET LENGTH` (what transferd recorded, the file, the PATCH just sent),
/// then the status, then header lines. A decision to resume never goes below what the server
/// confirmed nor past the file; a PATCH's accepted offset lies within what was sent; a reason
/// shows the server's text escaped (no control character reaches the terminal or a log).
func fuzzTusHeaders(_ data: Data) {
    let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
    guard lines.count >= 2 else { return }
    let numbers = lines[0].split(separator: " ").compactMap { Int64($0) }
    guard numbers.count == 4, numbers.allSatisfy({ $0 >= 0 }), numbers[0] <= numbers[1], let status = Int(lines[1]) else { return }
    let (confirmed, size, offset, length) = (numbers[0], numbers[1], numbers[2], numbers[3])
    guard offset <= size, length <= size - offset else { return }
    var headers = HTTPHeaders()
    for line in lines.dropFirst(2) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.add(String(line[..<colon]), String(HTTPHeaders.trimmed(line[line.index(after: colon)...])))
    }
    for name in ["Upload-Offset", "Upload-Length", "Tus-Max-Size"] {
        if let value = TusHeaders.offset(headers[name]) {
            check(value >= 0 && TusHeaders.offset(String(value)) == value, "\(name) \(value) does not read back")
        }
    }
    for name in ["Tus-Version", "Tus-Extension", "Tus-Checksum-Algorithm"] {
        let items = TusHeaders.list(headers[name])
        check(items.count <= 64, "more than 64 items")
        check(items.allSatisfy { !$0.isEmpty && !$0.contains(",") && $0 == $0.lowercased() }, "a bad item in \(items)")
    }
    let info = TusServerInfo(status: status, headers: headers)
    check(info.checksum == nil || info.checksum == "sha1", "checksum \(String(describing: info.checksum))")
    _ = info.problem(fileSize: size)
    func clean(_ text: String) -> Bool { !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }
    let place = "http://h/files/u1"
    switch TusResumeDecision.decide(status: status, offset: headers["Upload-Offset"], length: headers["Upload-Length"],
                                    confirmed: confirmed, fileSize: size, where: place) {
    case .resume(let at):
        check((200..<300).contains(status), "resume on status \(status)")
        check(at >= confirmed && at <= size, "resume at \(at) with \(confirmed) confirmed of \(size)")
    case .startOver(let reason):
        check(status == 404 || status == 410, "start over on status \(status)")
        check(clean(reason) && reason.contains(place), "reason \(reason.debugDescription)")
    case .fail(let reason):
        check(clean(reason) && reason.contains(place), "reason \(reason.debugDescription)")
    case .retry(let retried):
        check(retried == status && (retried >= 500 || [408, 425, 429].contains(retried)), "retry on status \(status)")
    }
    guard length > 0 else { return }
    switch TusResumeDecision.afterPatch(offset: offset, length: length, answered: headers["Upload-Offset"], where: place) {
    case .success(let new): check(new >= offset && new <= offset + length, "PATCH answer \(new) outside \(offset)+\(length)")
    case .failure(let failure): check(clean(failure.description), "reason \(failure.description.debugDescription)")
    }
}

// MARK: Resumable uploads (IETF draft)

/// Input: `CONFIRMED SIZE OFFSET LENGTH` (what transferd recorded, the file, the request just
/// sent), then the status, then header lines. Integers read back; limits split the file into
/// pieces within them that add up to it; a resume never goes below what the server confirmed nor
/// past the file, and only on 2xx; an append's answer moves the offset by what was sent at most;
/// a 104 counts only with interop version 8; every reason names the place without a control character.
func fuzzResumableHeaders(_ data: Data) {
    let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
    guard lines.count >= 2 else { return }
    let numbers = lines[0].split(separator: " ").compactMap { Int64($0) }
    guard numbers.count == 4, numbers.allSatisfy({ $0 >= 0 }), numbers[0] <= numbers[1], let status = Int(lines[1]) else { return }
    let (confirmed, size, offset, length) = (numbers[0], numbers[1], numbers[2], numbers[3])
    guard offset <= size, length <= size - offset else { return }
    var headers = HTTPHeaders()
    for line in lines.dropFirst(2) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.add(String(line[..<colon]), String(HTTPHeaders.trimmed(line[line.index(after: colon)...])))
    }
    for name in ["Upload-Offset", "Upload-Length", "Upload-Draft-Interop-Version"] {
        if let value = ResumableHeaders.integer(headers[name]) {
            check(value >= 0 && ResumableHeaders.integer(String(value)) == value, "\(name) \(value) does not read back")
        }
    }
    if let complete = ResumableHeaders.boolean(headers["Upload-Complete"]) {
        check(ResumableHeaders.boolean(ResumableHeaders.boolean(complete)) == complete, "Upload-Complete does not read back")
    }
    let base = URL(string: "http://h/_ietf/upload")!
    if let location = ResumableHeaders.location(headers["Location"], relativeTo: base) {
        check(["http", "https"].contains(location.scheme ?? "") && location.host?.isEmpty == false, "location \(location)")
    }
    if let limits = UploadLimits.parse(headers["Upload-Limit"]) {
        for value in [limits.maxSize, limits.minSize, limits.maxAppendSize, limits.minAppendSize, limits.maxAge] {
            check((value ?? 0) >= 0, "a negative limit")
        }
        if limits.problem(fileSize: size) == nil, size <= 1 << 24 {
            var at: Int64 = 0
            var pieces = 0
            while at < size {
                let piece = limits.appendLength(offset: at, size: size, cap: max(1, length))
                check(piece > 0 && piece <= size - at, "piece \(piece) at \(at) of \(size)")
                check(piece <= (limits.maxAppendSize ?? .max), "piece \(piece) past max-append-size")
                check(at + piece == size || piece >= (limits.minAppendSize ?? 0), "piece \(piece) below min-append-size")
                at += piece
                pieces += 1
                if pieces > 10_000 { return }
            }
        }
    }
    let head = ResponseHead(status: status, headers: headers, url: base)
    if let note = InterimAnnouncement.read(head, base: base) {
        check(status == 104 && ResumableHeaders.integer(headers["Upload-Draft-Interop-Version"]) == 8, "104 of another version")
        _ = note
    }
    func clean(_ text: String) -> Bool { !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }
    let place = "http://h/_ietf/uploads/r1"
    switch ResumableResumeDecision.decide(status: status, headers: headers, confirmed: confirmed, fileSize: size, where: place) {
    case .resume(let at):
        check((200..<300).contains(status), "resume on status \(status)")
        check(at >= confirmed && at <= size, "resume at \(at) with \(confirmed) confirmed of \(size)")
    case .complete:
        check((200..<300).contains(status) && ResumableHeaders.integer(headers["Upload-Offset"]) == size, "complete short of the file")
    case .lost(let reason):
        check(status == 404 || status == 410, "lost on status \(status)")
        check(clean(reason) && reason.contains(place), "reason \(reason.debugDescription)")
    case .fail(let reason):
        check(clean(reason) && reason.contains(place), "reason \(reason.debugDescription)")
    case .retry(let retried):
        check(retried == status && (retried >= 500 || [408, 425, 429].contains(retried)), "retry on status \(status)")
    }
    for completes in [false, true] {
        switch ResumableAnswer.decide(status: status, headers: headers, offset: offset, length: length, completes: completes,
                                      creation: false, where: place) {
        case .appended(let new):
            check(!completes && (200..<300).contains(status) && new == offset + length, "appended \(new) after \(offset)+\(length)")
        case .complete:
            check(completes && (200..<300).contains(status), "complete on status \(status)")
        case .fail(let reason):
            check(clean(reason), "reason \(reason.debugDescription)")
        case .conflict, .lost, .tooLarge, .retry:
            check(!(200..<300).contains(status), "\(status) read as a failure")
        }
    }
}

// MARK: AWS credentials

func fuzzAWSCredentials(_ data: Data) {
    // A secret in the document (if it is one) that no message may repeat.
    var secret: String?
    if case .object(let fields)? = try? JSONParser.parse(data), case .string(let value)? = fields["SecretAccessKey"], value.count >= 8 {
        secret = value
    }
    for kind in [AWSCredentialDocument.Kind.process, .endpoint] {
        switch AWSCredentialDocument.parse(data, kind: kind) {
        case .success(let found):
            check(!found.credentials.accessKeyID.isEmpty && !found.credentials.secretAccessKey.isEmpty, "empty key or secret taken")
            check(found.credentials.sessionToken.map { !$0.isEmpty } ?? true, "an empty session token taken")
            if kind == .process, case .object(let fields)? = try? JSONParser.parse(data) {
                check(fields["Version"] == .integer(1), "a process document without Version 1 taken")
            }
        case .failure(let problem):
            let message = "\(problem)"
            check(secret.map { !message.contains($0) } ?? true, "the secret is in the message: \(message)")
            check(!message.unicodeScalars.contains { $0.value < 0x20 }, "a control character in: \(message)")
        }
    }
    if let found = STSRequest.credentials(in: data) {
        check(!found.credentials.accessKeyID.isEmpty && !found.credentials.secretAccessKey.isEmpty, "STS: empty key or secret taken")
    }
    let text = String(decoding: data, as: UTF8.self)
    _ = AWSCredentialDocument.parseTimestamp(text)
    // Words quoted back with single quotes split into the same words.
    if let words = CredentialProcess.arguments(text) {
        let quoted = words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        check(CredentialProcess.arguments(quoted) == words, "\(words) do not split back from \(quoted)")
    }
}

// MARK: Metalink

/// Every file read has a safe relative name (unique), only http(s) URLs without user info and
/// without repeats, a SHA-256 of 64 lowercase hex digits, and piece hashes of the algorithm's
/// length whose count matches the size when both are given; the piece sums stay inside the file.
/// A refusal names the document, has a fix, and shows no control character.
func fuzzMetalink(_ data: Data) {
    let origin = "fuzz.meta4"
    let files: [MetalinkFile]
    do {
        files = try Metalink.parse(data, origin: origin)
    } catch let error as JobFileError {
        check(error.file == origin, "a refusal names \(error.file)")
        check(!error.message.isEmpty && !(error.fix ?? "").isEmpty, "a refusal without a message or a fix: \(error)")
        check(!error.description.unicodeScalars.contains(where: TerminalText.mustEscape),
              "a control character in: \(error.description.debugDescription)")
        check(error.line.map { $0 > 0 } ?? true, "a refusal at line \(error.line ?? 0)")
        return
    } catch {
        check(false, "not a JobFileError: \(error)")
        return
    }
    check(!files.isEmpty, "a metalink read without files")
    var names: Set<String> = []
    for file in files {
        let name = file.name
        check(names.insert(name).inserted, "the name \(name.debugDescription) twice")
        check(!name.isEmpty && name.utf8.count <= 1024 && !name.hasPrefix("/") && !name.contains("\\"),
              "an unsafe name \(name.debugDescription)")
        check(!name.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) },
              "a control character in the name \(name.debugDescription)")
        check(!name.split(separator: "/", omittingEmptySubsequences: false).contains { $0.isEmpty || $0 == "." || $0 == ".." },
              "an empty, . or .. component in \(name.debugDescription)")
        check(!file.urls.isEmpty, "\(name.debugDescription) without a URL")
        check(Set(file.urls.map(\.absoluteString)).count == file.urls.count, "a URL twice for \(name.debugDescription)")
        for url in file.urls {
            check(["http", "https"].contains(url.scheme?.lowercased() ?? ""), "a URL of another scheme: \(url)")
            check(url.user == nil && url.password == nil, "a URL with user info taken")
            check(!(url.host ?? "").isEmpty, "a URL without a host: \(url)")
        }
        if let size = file.size { check(size >= 0, "a negative size \(size)") }
        if let sha256 = file.sha256 {
            check(sha256.utf8.count == 64 && sha256.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) },
                  "a SHA-256 \(sha256.debugDescription)")
        }
        guard let pieces = file.pieces else { continue }
        check(pieces.length > 0 && pieces.length <= 1 << 30, "a piece length \(pieces.length)")
        check(pieces.hashes.count <= 1_000_000, "\(pieces.hashes.count) pieces")
        let digest = pieces.algorithm == .sha1 ? 20 : 32
        check(pieces.hashes.allSatisfy { $0.count == digest }, "a \(pieces.algorithm) piece hash of another length")
        guard let size = file.size else { continue }
        let count = size / pieces.length + (size % pieces.length == 0 ? 0 : 1)
        check(Int64(pieces.hashes.count) == count, "\(pieces.hashes.count) pieces of \(pieces.length) for \(size) bytes")
        // The pieces tile the file: the first starts at 0, the last ends at the size, each overlaps only itself.
        for index in Set([0, 1, pieces.hashes.count / 2, pieces.hashes.count - 2, pieces.hashes.count - 1]) where index >= 0 && index < pieces.hashes.count {
            let range = pieces.range(of: index, size: size)
            check(range.lowerBound >= 0 && range.upperBound <= size && !range.isEmpty, "piece \(index) is \(range) of \(size)")
            if index == 0 { check(range.lowerBound == 0, "the first piece starts at \(range.lowerBound)") }
            if index == pieces.hashes.count - 1 { check(range.upperBound == size, "the last piece ends at \(range.upperBound), not \(size)") }
            check(pieces.pieces(overlapping: range) == index..<(index + 1), "piece \(index)'s bytes overlap \(pieces.pieces(overlapping: range))")
        }
        check(pieces.pieces(overlapping: 0..<size) == 0..<pieces.hashes.count, "the whole file is not every piece")
    }
}
