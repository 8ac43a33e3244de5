import Foundation

/// Reads job files, version 1: JSON (`NAME.json`: one job, or `{"jobs": [...]}`)
/// and URL lists (`NAME.urls`: `URL [DEST_DIR]` per line, `#` comments).
///
/// Validation is strict — unknown keys, wrong types, empty URLs, unsupported
/// schemes, paths that leave the root and duplicate ids are errors that name
/// the file, the job, the field and the fix. Nothing is expanded here:
/// `${env:NAME}` references stay as written.
package struct JobFileParser: Sendable {
    /// Larger files are rejected unread (split them), but for URL lists up to `maxListSize`,
    /// which are read a piece at a time (`LargeURLList`).
    package static let maxFileSize = 8 << 20
    /// The largest URL list: about three million URLs of 80 bytes.
    package static let maxListSize = 256 << 20
    /// A URL list over this size is read a piece at a time (`LargeURLList`) and recorded in a
    /// transaction of its own: read whole, a list of 100,000 URLs (4 MiB) took 107 MiB of
    /// memory to ingest; a piece at a time, 1,000,000 (39 MiB) took 110 MiB (release build).
    package static let largeListSize = 1 << 20
    package static let formatVersion = 1

    /// Destinations and upload sources must lie inside this directory.
    package let root: String
    /// The queue folder, when known: no job may read or write inside it (its
    /// store holds every job's URLs; a file written there would be a job file).
    package let queueDirectory: String?
    /// Whether `on_done` / `on_failed` commands are taken from job files (`--allow-job-hooks`):
    /// whoever can write a job file, or holds the API token, can then run commands as this user.
    package let allowsCommands: Bool

    /// - Parameter root: relative paths are taken from the current folder.
    package init(root: String, queueDirectory: String? = nil, allowsCommands: Bool = false) {
        self.allowsCommands = allowsCommands
        func absolute(_ path: String) -> String {
            PathNormalization.normalize(path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path)
        }
        self.root = absolute(root)
        self.queueDirectory = queueDirectory.map(absolute)
    }

    /// The extensions ingest reads; other files in the queue folder are left alone.
    package static func isJobFile(_ name: String) -> Bool {
        !name.hasPrefix(".") && (name.hasSuffix(".json") || name.hasSuffix(".urls") || isMetalink(name))
    }

    /// A Metalink document (`.meta4`, RFC 5854; `.metalink`, Metalink 3.0): one download a file it lists.
    package static func isMetalink(_ name: String) -> Bool {
        name.hasSuffix(".meta4") || name.hasSuffix(".metalink")
    }

    package func parse(name: String, data: Data) -> Result<[JobSpec], JobFileRejection> {
        func reject(_ message: String, fix: String? = nil) -> Result<[JobSpec], JobFileRejection> {
            .failure(JobFileRejection(errors: [JobFileError(file: name, message: message, fix: fix)]))
        }
        guard data.count <= Self.maxFileSize else {
            return reject("the file is \(data.count) bytes; the limit is \(Self.maxFileSize) bytes",
                          fix: "split it into several job files")
        }
        guard let text = String(data: data, encoding: .utf8), !text.utf8.contains(0) else {
            return reject("not UTF-8 text (binary data?)", fix: "job files are JSON or URL lists")
        }
        guard !text.allSatisfy(\.isWhitespace) else {
            return reject("the file is empty", fix: "write one job as a JSON object, or one URL per line in a .urls file")
        }
        let stem = ((name as NSString).lastPathComponent as NSString).deletingPathExtension
        var context = Context(file: name, idStem: stem, contentHash: SHA256Hasher.hex(of: data), root: root,
                              queueDirectory: queueDirectory)
        context.allowsCommands = allowsCommands
        if name.hasSuffix(".urls") {
            context.parseList(text)
        } else if Self.isMetalink(name) {
            do {
                context.parseMetalink(try Metalink.parse(data, origin: name))
            } catch let error as JobFileError {
                return .failure(JobFileRejection(errors: [error]))
            } catch {
                return reject("not a metalink (\(error))", fix: "check it is a Metalink 4 (.meta4) or 3.0 (.metalink) document")
            }
        } else {
            do {
                context.data = data
                context.parseDocument(try JSONValue.parse(data))
            } catch let failure as JSONParser.Failure where failure.duplicate != nil {
                let first = failure.duplicate!
                return .failure(JobFileRejection(errors: [JobFileError(
                    file: name, line: failure.line, column: failure.column,
                    message: "the key \"\(first.key)\" is given twice in one object (first at line \(first.line), column \(first.column))",
                    fix: "keep one of them: JSON readers disagree on which one counts, so transferd takes neither")]))
            } catch {
                return reject("not valid JSON (\(Self.describe(error)))", fix: "check the syntax, e.g. with `jq . \(name)`")
            }
        }
        return context.errors.isEmpty ? .success(context.jobs) : .failure(JobFileRejection(errors: context.errors))
    }

    /// A URL list over `maxFileSize` bytes (up to `maxListSize`), opened as ingest opens a
    /// job file (never following a link, never blocking on a FIFO) and read once: its hash,
    /// and that it is text. Its lines are parsed as the store takes its jobs.
    package func openLargeList(_ path: String, name: String) throws(JobFileRejection) -> LargeURLList {
        func rejection(_ message: String, fix: String) -> JobFileRejection {
            JobFileRejection(errors: [JobFileError(file: name, message: message, fix: fix)])
        }
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw rejection("could not be read: \(POSIXFailure(operation: "open", path: path))", fix: "make it a readable regular file")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw rejection("is not a regular file; it was not read", fix: "write the list itself, not a link to it")
        }
        guard info.st_size <= Self.maxListSize else {
            close(descriptor)
            throw rejection("the file is \(info.st_size) bytes; the limit for a URL list is \(Self.maxListSize) bytes",
                            fix: "split it into lists of at most \(Self.maxListSize) bytes")
        }
        return try LargeURLList(name: name, descriptor: descriptor, parser: self)
    }

    static func describe(_ error: Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            return (context.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey] as? String
                ?? context.debugDescription
        }
        return "\(error)"
    }
}

/// The accumulating state of parsing one file.
struct Context {
    let file: String
    /// What derived ids are made of (`JobIDs.derived`): the file's stem and content digest.
    let idStem: String
    let contentHash: String
    let root: String
    let queueDirectory: String?
    var allowsCommands = false
    /// The JSON file's bytes, read again to name the line and column of a mistake.
    var data: Data?
    /// Whether the jobs are the items of a "jobs" list (else the top object is the one job).
    private var listed = false
    var jobs: [JobSpec] = []
    /// The jobs a URL list has given so far (kept by `parseList`, handed on by `LargeURLList`).
    private(set) var listedJobs = 0
    var errors: [JobFileError] = []
    private var seenIDs: Set<String> = []
    /// Download destinations of this file's jobs, with the job number that claimed each.
    private var seenDestinations: [String: Int] = [:]
    /// Whether destinations are remembered by a 128-bit digest instead (a large list: 40 bytes
    /// a job instead of the path's length and more).
    var destinationsByDigest = false
    private var seenDestinationDigests: [DestinationDigest: Int] = [:]
    /// The URL last parsed: checking a URL and naming its destination read it once.
    private var lastParsed: (text: String, url: URL?)?

    init(file: String, idStem: String, contentHash: String, root: String, queueDirectory: String? = nil) {
        self.file = file
        self.idStem = idStem
        self.contentHash = contentHash
        self.root = root
        self.queueDirectory = queueDirectory
    }

    /// The id of job `number` when the file gives it none.
    func derivedID(_ number: Int) -> String { JobIDs.derived(stem: idStem, contentHash: contentHash, number: number) }

    mutating func fail(_ job: Int?, _ id: String?, _ field: String?, _ message: String, fix: String? = nil,
                       at position: (line: Int, column: Int)? = nil) {
        if errors.count < 50 {
            errors.append(JobFileError(file: file, job: job, id: id, field: field, line: position?.line, column: position?.column,
                                       message: message, fix: fix))
        }
    }

    /// Where `path` (from the job object of job `number`) is in the JSON file, when known.
    func position(inJob number: Int, _ path: [JSONParser.PathStep]) -> (line: Int, column: Int)? {
        guard let data else { return nil }
        return JSONParser.position(of: (listed ? [.key("jobs"), .index(number - 1)] : []) + path, in: data)
    }

    // MARK: URL lists

    mutating func parseList(_ text: String) {
        for (offset, rawLine) in JobFileParser.lines(text).enumerated() {
            if let spec = parseListLine(rawLine, number: offset + 1) { jobs.append(spec) }
        }
        if jobs.isEmpty && errors.isEmpty {
            fail(nil, nil, nil, "the list has no URLs", fix: "write one URL per line")
        }
    }

    /// The job of line `number` of a URL list; nil for a blank line, a comment or a mistake
    /// (recorded).
    mutating func parseListLine(_ rawLine: Substring, number: Int) -> JobSpec? {
        let line = rawLine.trimmingSpaces()
        guard !line.isEmpty, !line.hasPrefix("#") else { return nil }
        let parts = JobFileParser.words(line)
        guard parts.count <= 2 else {
            fail(number, nil, nil, "line \(number) has \(parts.count) words", fix: "write `URL [DEST_DIR]`")
            return nil
        }
        let id = derivedID(listedJobs + errors.count + 1)
        guard let url = checkURL(parts[0], kind: .download, job: number, id: id) else { return nil }
        let directory = parts.count == 2 ? parts[1] + "/" : nil
        guard let destination = resolveDestination(directory, url: url, job: number, id: id),
              claimDestination(destination, job: number, id: nil) else { return nil }
        var spec = JobSpec(id: id, kind: .download, url: url, destination: destination)
        spec.priority = 0
        listedJobs += 1
        return spec
    }

    // MARK: JSON

    mutating func parseDocument(_ document: JSONValue) {
        guard case .object(let top) = document else {
            fail(nil, nil, nil, "the top level is \(document.typeName)",
                 fix: "write one job as an object, or {\"jobs\": [...]} for several")
            return
        }
        if let version = top["version"] {
            guard case .integer(let number) = version, number == Int64(JobFileParser.formatVersion) else {
                fail(nil, nil, "version", "this transferd reads version \(JobFileParser.formatVersion), found \(describe(version))",
                     fix: "write \"version\": 1 or use a newer transferd")
                return
            }
        }
        if let list = top["jobs"] {
            listed = true
            let extra = Set(top.keys).subtracting(["jobs", "version"])
            for key in extra.sorted() {
                fail(nil, nil, key, "unknown key next to \"jobs\"", fix: "put job fields inside the objects of \"jobs\"")
            }
            guard case .array(let items) = list else {
                fail(nil, nil, "jobs", "must be a list of job objects, not \(list.typeName)")
                return
            }
            guard !items.isEmpty else {
                fail(nil, nil, "jobs", "the list is empty", fix: "add at least one job")
                return
            }
            for (index, item) in items.enumerated() {
                guard case .object(let fields) = item else {
                    fail(index + 1, nil, nil, "is \(item.typeName), not a job object")
                    continue
                }
                parseJob(fields, number: index + 1)
            }
        } else {
            var fields = top
            fields["version"] = nil
            parseJob(fields, number: 1)
        }
    }

    private static let commonKeys: Set<String> = ["id", "type", "url", "priority", "transport", "headers", "retries", "limit_rate",
                                                  "on_done", "on_failed", "notify"]
    private static let keysByKind: [JobSpec.Kind: Set<String>] = [
        .download: ["dest", "connections", "sha256", "checksums", "checksums_name", "mirrors", "connections_per_mirror", "overwrite",
                    "delete", "max_delete", "force", "region", "endpoint", "profile", "include", "exclude",
                    "speed_limit", "speed_time"],
        .put: ["source", "method", "content_type", "sha256"],
        .form: ["fields", "files"],
        .s3Upload: ["source", "part_size", "parts_in_flight", "region", "endpoint", "profile", "content_type",
                    "skip_unchanged", "include", "exclude", "delete", "max_delete", "force"],
        .s3Copy: ["source", "part_size", "parts_in_flight", "region", "endpoint", "profile", "skip_unchanged", "include", "exclude",
                  "delete", "max_delete", "force",
                  "source_endpoint", "source_region", "source_profile"],
        .tus: ["source", "chunk_size", "content_type"],
        .resumable: ["source", "content_type"],
    ]

    mutating func parseJob(_ fields: [String: JSONValue], number: Int) {
        let errorsBefore = errors.count
        var reader = FieldReader(fields: fields)
        let givenID = reader.string("id")
        let id = givenID ?? derivedID(number)
        let display = givenID
        func fail(_ field: String?, _ message: String, fix: String? = nil, at position: (line: Int, column: Int)? = nil) {
            self.fail(number, display, field, message, fix: fix, at: position)
        }

        if let givenID {
            if givenID.isEmpty || givenID.count > 128
                || !givenID.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._:-".contains($0)) }) {
                fail("id", "must be 1–128 letters, digits or . _ : -", fix: "pick a simple stable name")
            } else if seenIDs.contains(givenID) {
                fail("id", "the same id is used twice in this file", fix: "ids must be unique")
            }
            seenIDs.insert(givenID)
        }

        let typeName = reader.string("type") ?? "download"
        guard let kind = JobSpec.Kind(rawValue: typeName) else {
            fail("type", "unknown job type \"\(typeName)\"",
                 fix: "use one of \(JobSpec.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
            return
        }
        let allowed = Self.commonKeys.union(Self.keysByKind[kind]!)
        for key in fields.keys.sorted() where !allowed.contains(key) {
            let suggestion = Spelling.closest(to: key, in: allowed).map { "did you mean \"\($0)\"?" }
            // Every kind that takes it, in the order the kinds are listed.
            let owners = JobSpec.Kind.allCases.filter { Self.keysByKind[$0]?.contains(key) == true }.map { "\"\($0.rawValue)\"" }
            let elsewhere = owners.isEmpty ? nil : "it belongs to \(owners.joined(separator: " and ")) jobs"
            fail(key, "unknown key for a \(kind.rawValue) job", fix: suggestion ?? elsewhere ?? "remove it")
        }

        guard let rawURL = reader.string("url") else {
            // A "url" of the wrong type is reported with the other type errors.
            if !reader.has("url") { fail("url", "is missing", fix: "every job needs a \"url\"") }
            reportTypeErrors(reader, number: number, id: display)
            return
        }
        let url = checkURL(rawURL, kind: kind, job: number, id: display)
        var spec = JobSpec(id: id, kind: kind, url: url ?? rawURL)

        spec.priority = reader.integer("priority", in: -1000...1000).map(Int.init) ?? 0
        if let transport = reader.string("transport") {
            if ["curl", "urlsession"].contains(transport) { spec.transport = transport } else {
                fail("transport", "unknown transport \"\(transport)\"", fix: "use \"curl\" or \"urlsession\"")
            }
        }
        if let headers = reader.stringMap("headers") {
            for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
                if let problem = EnvironmentReference.problem(in: value) {
                    fail("headers", "\(name): \(problem)", fix: "write a secret as ${env:NAME}")
                }
                if let refusal = JobHeaderRule.refusal(name: name, value: value) {
                    fail("headers", refusal.message, fix: refusal.fix, at: position(inJob: number, [.key("headers"), .key(name)]))
                }
            }
            spec.headers = headers
        }
        spec.retries = reader.integer("retries", in: 1...1000).map(Int.init)
        if let rate = reader.string("limit_rate") {
            if let bytes = ByteSize.parse(rate), bytes > 0 { spec.limitRate = bytes } else {
                fail("limit_rate", "\"\(rate)\" is not a rate", fix: "write e.g. \"500K\" or \"10M\" (bytes per second)")
            }
        }

        if let floor = reader.string("speed_limit") {
            if floor == "0" { spec.speedLimit = 0 } else if let bytes = ByteSize.parse(floor), bytes > 0 { spec.speedLimit = bytes } else {
                fail("speed_limit", "\"\(floor)\" is not a rate", fix: "write e.g. \"1K\" (bytes per second), or \"0\" for no floor")
            }
        }
        spec.speedTime = reader.integer("speed_time", in: 1...86_400)

        for key in ["on_done", "on_failed"] {
            guard let argv = reader.stringList(key) else { continue }
            if !allowsCommands {
                fail(key, "commands from job files run only when the run allows them",
                     fix: "start the run with --allow-job-hooks (then whoever can write a job file or holds the API token "
                     + "can run commands as this user), or give the command to the run: --on-done / --on-failed")
            } else if let problem = HookCommand.problem(argv) {
                fail(key, problem, fix: "write the command as a list: [\"/usr/local/bin/index\", \"--fast\"]; "
                     + "for a shell, ask for one: [\"sh\", \"-c\", \"...\"]")
            } else if key == "on_done" { spec.onDone = argv } else { spec.onFailed = argv }
        }
        if let notify = reader.string("notify") {
            if let problem = HookCommand.notifyProblem(notify) {
                fail("notify", problem, fix: "give an http:// or https:// URL")
            } else {
                spec.notify = notify
            }
        }

        switch kind {
        case .download:
            spec.connections = reader.integer("connections", in: 1...64).map(Int.init)
            spec.sha256 = reader.string("sha256")?.lowercased()
            if let sha = spec.sha256, !(sha.count == 64 && sha.allSatisfy(\.isHexDigit)) {
                fail("sha256", "must be 64 hex digits")
            }
            if let list = reader.string("checksums") {
                if spec.sha256 != nil {
                    fail("checksums", "goes with no \"sha256\": each gives the file's SHA-256", fix: "keep one of them")
                } else if let parsed = URL(string: list), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""),
                          parsed.host?.isEmpty == false, !list.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                    spec.checksums = list
                } else {
                    fail("checksums", "must be the http:// or https:// URL of a SHA256SUMS list")
                }
            }
            spec.checksumsName = reader.string("checksums_name")
            if spec.checksumsName != nil && spec.checksums == nil && !reader.has("checksums") {
                fail("checksums_name", "goes with \"checksums\"", fix: "add the list's URL as \"checksums\", or remove it")
            }
            if let policy = reader.string("overwrite") {
                if let value = OverwritePolicy(rawValue: policy) { spec.overwrite = value } else {
                    fail("overwrite", "unknown policy \"\(policy)\"", fix: "use \"refuse\", \"overwrite\" or \"skip\"")
                }
            }
            if let mirrors = reader.stringList("mirrors") {
                if let url, !["http", "https"].contains(URL(string: url)?.scheme?.lowercased() ?? "") {
                    fail("mirrors", "are other http:// or https:// URLs of the file at \"url\", which is not one",
                         fix: "remove them, or make \"url\" one of the http(s) URLs")
                } else if mirrors.isEmpty || mirrors.count > 32 {
                    fail("mirrors", "must list 1 to 32 URLs (got \(mirrors.count))")
                } else if let bad = mirrors.firstIndex(where: { text in
                    guard let parsed = URL(string: text), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""),
                          parsed.host?.isEmpty == false else { return true }
                    return text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
                }) {
                    fail("mirrors", "item \(bad + 1) is not an http:// or https:// URL: \"\(Redaction.url(string: mirrors[bad]))\"")
                } else {
                    spec.mirrors = mirrors
                }
            }
            spec.connectionsPerMirror = reader.integer("connections_per_mirror", in: 1...16).map(Int.init)
            if spec.connectionsPerMirror != nil && !reader.has("mirrors") {
                fail("connections_per_mirror", "goes with \"mirrors\"", fix: "list the other URLs as \"mirrors\", or remove it")
            }
            let include = reader.stringList("include")
            let exclude = reader.stringList("exclude")
            if let url, S3Prefix(url) != nil {
                // A whole prefix goes into a folder, named by "dest".
                if spec.sha256 != nil { fail("sha256", "a prefix holds many objects: one SHA-256 cannot check them", fix: "remove it") }
                if spec.checksums != nil {
                    fail("checksums", "is for one file; a prefix's objects are checked by the checksums S3 keeps", fix: "remove it")
                }
                spec.include = include
                spec.exclude = exclude
                if let dest = reader.string("dest"), !dest.isEmpty {
                    spec.destination = resolveInsideRoot(dest, field: "dest", job: number, id: display)
                    if let destination = spec.destination { _ = claimDestination(destination, job: number, id: display) }
                } else {
                    fail("dest", "is missing or empty: a prefix (a url ending with /) is saved into a folder",
                         fix: "name the folder, e.g. \"dest\": \"mirror/\"")
                }
            } else {
                if include != nil || exclude != nil {
                    fail(include != nil ? "include" : "exclude", "only a prefix download (an s3:// url ending with /) takes globs",
                         fix: "end the url with / to download the whole prefix, or remove it")
                }
                if let url, errors.count == errorsBefore || reader.string("dest") != nil {
                    spec.destination = resolveDestination(reader.string("dest"), url: url, job: number, id: display)
                    if let destination = spec.destination { _ = claimDestination(destination, job: number, id: display) }
                }
            }
            spec.region = reader.string("region")
            spec.endpoint = reader.string("endpoint")
            spec.profile = reader.string("profile")
        case .put:
            spec.source = resolveSource(reader.string("source"), job: number, id: display, required: true)
            spec.method = reader.string("method")?.uppercased()
            if let method = spec.method, !["PUT", "POST"].contains(method) {
                fail("method", "must be \"PUT\" or \"POST\"")
            }
            spec.contentType = reader.string("content_type")
            spec.sha256 = reader.string("sha256")?.lowercased()
            if let sha = spec.sha256, !(sha.count == 64 && sha.allSatisfy(\.isHexDigit)) {
                fail("sha256", "must be 64 hex digits")
            }
        case .form:
            spec.fields = reader.stringMap("fields")
            spec.files = reader.formFiles("files")?.map { file in
                var copy = file
                copy.path = resolveSource(file.path, job: number, id: display, required: true) ?? file.path
                return copy
            }
            if (spec.fields ?? [:]).isEmpty && (spec.files ?? []).isEmpty {
                fail("fields", "a form job needs \"fields\" or \"files\"")
            }
        case .s3Upload, .s3Copy:
            if kind == .s3Copy {
                spec.source = checkCopySource(reader.string("source"), destination: spec.url, job: number, id: display)
            } else {
                spec.source = resolveSource(reader.string("source"), job: number, id: display, required: true)
            }
            spec.partSize = reader.string("part_size").flatMap { text in
                guard let bytes = ByteSize.parse(text), bytes >= 5 << 20 else {
                    fail("part_size", "\"\(text)\" is below S3's 5 MiB minimum or not a size", fix: "write e.g. \"16M\"")
                    return nil
                }
                return bytes
            }
            spec.partsInFlight = reader.integer("parts_in_flight", in: 1...64).map(Int.init)
            spec.region = reader.string("region")
            spec.endpoint = reader.string("endpoint")
            spec.profile = reader.string("profile")
            spec.contentType = reader.string("content_type")
            spec.skipUnchanged = reader.bool("skip_unchanged")
            spec.include = reader.stringList("include")
            spec.exclude = reader.stringList("exclude")
            if kind == .s3Copy {
                spec.sourceEndpoint = reader.string("source_endpoint")
                spec.sourceRegion = reader.string("source_region")
                spec.sourceProfile = reader.string("source_profile")
                checkCopyFields(spec, job: number, id: display)
            }
        case .tus:
            spec.source = resolveSource(reader.string("source"), job: number, id: display, required: true)
            spec.chunkSize = reader.string("chunk_size").flatMap { text in
                guard let bytes = ByteSize.parse(text), TusOptions.chunkSizes.contains(bytes) else {
                    fail("chunk_size", "\"\(text)\" is not a size from 64K to 1G", fix: "write e.g. \"8M\" (the default)")
                    return nil
                }
                return bytes
            }
            spec.contentType = reader.string("content_type")
        case .resumable:
            spec.source = resolveSource(reader.string("source"), job: number, id: display, required: true)
            spec.contentType = reader.string("content_type")
        }
        if [.download, .s3Upload, .s3Copy].contains(kind) { readSyncFields(&reader, into: &spec, number: number, id: display) }
        reportTypeErrors(reader, number: number, id: display)
        if errors.count == errorsBefore { jobs.append(spec) }
    }

    /// `delete`, `max_delete` and `force`: a bulk job made a sync. Only for a prefix (a download or
    /// copy whose url ends with /) or an upload (its source must then be a folder, checked as it runs).
    private mutating func readSyncFields(_ reader: inout FieldReader, into spec: inout JobSpec, number: Int, id: String?) {
        spec.delete = reader.bool("delete")
        spec.maxDelete = reader.integer("max_delete", in: 0...100).map(Int.init)
        spec.force = reader.bool("force")
        let given = [("delete", spec.delete != nil), ("max_delete", spec.maxDelete != nil), ("force", spec.force != nil)]
            .filter(\.1).map(\.0)
        guard let first = given.first else { return }
        if spec.kind != .s3Upload && S3Prefix(spec.url) == nil && !spec.url.hasSuffix("/") {
            fail(number, id, first, "is for a whole folder or prefix (a url ending with /); this job moves one object",
                 fix: "remove it, or end the url with / to copy the whole prefix")
        } else if spec.delete != true && (spec.maxDelete != nil || spec.force != nil) {
            fail(number, id, spec.maxDelete != nil ? "max_delete" : "force", "goes with \"delete\": true",
                 fix: "add \"delete\": true, or remove it")
        }
    }

    private mutating func reportTypeErrors(_ reader: FieldReader, number: Int, id: String?) {
        for problem in reader.problems { fail(number, id, problem.field, problem.message) }
    }

    private func describe(_ value: JSONValue) -> String {
        if case .integer(let number) = value { return String(number) }
        return value.typeName
    }

    // MARK: URLs and paths

    /// False (after recording why) when an earlier job of this file writes the same file:
    /// two downloads into one destination would share one partial file.
    /// One download job for each file of a metalink: from its first URL, the others as mirrors,
    /// saved under its name below the root, its size, SHA-256 and piece hashes checked.
    mutating func parseMetalink(_ files: [MetalinkFile]) {
        for (index, file) in files.enumerated() {
            let number = index + 1
            let id = derivedID(number)
            guard let first = file.urls.first, let url = checkURL(first.absoluteString, kind: .download, job: number, id: nil),
                  let destination = resolveInsideRoot(file.name, field: "dest", job: number, id: nil) else { continue }
            if let reason = PartialNames.refusal(of: destination) {
                fail(number, nil, "dest", "cannot save to \(destination): \(reason)", fix: "rename the file in the metalink")
                continue
            }
            guard claimDestination(destination, job: number, id: nil) else { continue }
            var spec = JobSpec(id: id, kind: .download, url: url, destination: destination)
            if file.urls.count > 1 { spec.mirrors = file.urls.dropFirst().map(\.absoluteString) }
            spec.sha256 = file.sha256
            spec.size = file.size
            spec.pieces = file.pieces?.encoded
            jobs.append(spec)
        }
    }

    mutating func claimDestination(_ destination: String, job: Int, id: String?) -> Bool {
        let first: Int?
        if destinationsByDigest {
            let digest = DestinationDigest(destination)
            first = seenDestinationDigests[digest]
            if first == nil { seenDestinationDigests[digest] = job }
        } else {
            first = seenDestinations[destination]
            if first == nil { seenDestinations[destination] = job }
        }
        if let first {
            fail(job, id, "dest", "\(destination) is also the destination of job \(first) in this file",
                 fix: "give each download its own \"dest\"")
            return false
        }
        return true
    }

    private mutating func parsed(_ text: String) -> URL? {
        if let lastParsed, lastParsed.text == text { return lastParsed.url }
        let url = URL(string: text)
        lastParsed = (text, url)
        return url
    }

    mutating func checkURL(_ text: String, kind: JobSpec.Kind, job: Int, id: String?) -> String? {
        let trimmed = String(text.trimmingSpaces())
        guard !trimmed.isEmpty else {
            fail(job, id, "url", "is empty", fix: "give the address to transfer")
            return nil
        }
        guard !trimmed.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            fail(job, id, "url", "contains a control character (a line break, tab or NUL)",
                 fix: "percent-encode it (%0A for a line feed) or remove it")
            return nil
        }
        guard let url = parsed(trimmed), let scheme = url.scheme?.lowercased() else {
            fail(job, id, "url", "\"\(trimmed)\" is not a URL")
            return nil
        }
        let schemes: [String] = kind == .s3Upload || kind == .s3Copy ? ["s3"] : kind == .download ? ["http", "https", "s3"] : ["http", "https"]
        guard schemes.contains(scheme) else {
            fail(job, id, "url", "the scheme \"\(scheme)\" is not supported for \(kind.rawValue) jobs",
                 fix: "use \(schemes.map { "\($0)://" }.joined(separator: " or "))")
            return nil
        }
        guard url.host?.isEmpty == false else {
            fail(job, id, "url", "\"\(trimmed)\" has no host")
            return nil
        }
        if kind == .download, scheme == "s3", S3Prefix(trimmed) == nil, let problem = S3Location.downloadProblem(trimmed) {
            fail(job, id, "url", problem, fix: "name one object (s3://bucket/key) or a prefix (s3://bucket/prefix/)")
            return nil
        }
        return trimmed
    }

    /// An absolute, normalised path inside the root, or nil after recording why not.
    mutating func resolveInsideRoot(_ path: String, field: String, job: Int, id: String?) -> String? {
        guard !path.utf8.contains(0) else {
            // A C string ends at NUL: the file written would not be the one named.
            fail(job, id, field, "contains a NUL character (\\u0000)", fix: "remove it from the path")
            return nil
        }
        let absolute = path.hasPrefix("/") ? path : root + "/" + path
        let normalised = PathNormalization.normalize(absolute)
        guard normalised == root || normalised.hasPrefix(root.hasSuffix("/") ? root : root + "/") else {
            fail(job, id, field, "\"\(path)\" is outside the root \(root)",
                 fix: "use a path inside the root, or run with --root set to a folder that contains it")
            return nil
        }
        if let queueDirectory, normalised == queueDirectory || normalised.hasPrefix(queueDirectory + "/") {
            fail(job, id, field, "\"\(path)\" is inside the queue folder \(queueDirectory), which holds the queue's own files",
                 fix: "use a path outside the queue folder")
            return nil
        }
        return normalised
    }

    mutating func resolveDestination(_ dest: String?, url: String, job: Int, id: String?) -> String? {
        let name = parsed(url).map(URLFileName.of) ?? "index.html"
        let resolved: String?
        if let dest, !dest.isEmpty {
            let path = dest.hasSuffix("/") ? dest + name : dest
            let inside = resolveInsideRoot(path, field: "dest", job: job, id: id)
            // "." or the root itself names a folder.
            resolved = inside == root ? resolveInsideRoot(name, field: "dest", job: job, id: id) : inside
        } else {
            resolved = resolveInsideRoot(name, field: "dest", job: job, id: id)
        }
        guard let resolved else { return nil }
        // A name transferd keeps for partial files (or one too long to download under) is no destination.
        if let reason = PartialNames.refusal(of: resolved) {
            fail(job, id, "dest", "\"\(resolved)\" cannot be a destination: \(reason)",
                 fix: dest.map { _ in "choose another file name" } ?? "name the file with \"dest\"")
            return nil
        }
        return resolved
    }

    /// An `s3-copy` job's source: an s3:// object or prefix, or an http(s):// URL, that with the
    /// destination makes a copy (`S3CopyTarget`), or nil after recording why not.
    mutating func checkCopySource(_ source: String?, destination: String, job: Int, id: String?) -> String? {
        guard let source, !source.isEmpty else {
            fail(job, id, "source", "is missing",
                 fix: "name the object (s3://bucket/key), prefix (s3://bucket/prefix/) or http(s):// URL to copy")
            return nil
        }
        if source.hasPrefix("http://") || source.hasPrefix("https://") {
            guard let url = URL(string: source), url.host?.isEmpty == false,
                  !source.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                fail(job, id, "source", "\"\(source)\" is not a URL with a host", fix: "write the whole address, https://host/path")
                return nil
            }
            return source
        }
        guard S3Prefix(source) != nil || S3Location(source) != nil else {
            fail(job, id, "source", "\"\(source)\" is not an s3:// object or prefix, nor an http(s):// URL",
                 fix: "write s3://bucket/key for an object, s3://bucket/prefix/ for a prefix")
            return nil
        }
        guard let target = S3CopyTarget(source: source, destination: destination) else { return source }
        if let problem = target.problem {
            fail(job, id, "url", problem, fix: "copy to another key or prefix")
            return nil
        }
        return source
    }

    /// The fields of an `s3-copy` that only some sources take.
    mutating func checkCopyFields(_ spec: JobSpec, job: Int, id: String?) {
        guard let source = spec.source else { return }
        let prefix = S3Prefix(source) != nil
        let web = !source.hasPrefix("s3://")
        if spec.include != nil || spec.exclude != nil, !prefix {
            fail(job, id, spec.include != nil ? "include" : "exclude", "only a prefix copy (a source ending with /) takes globs",
                 fix: "end the source with / to copy the whole prefix, or remove it")
        }
        let other = [("source_endpoint", spec.sourceEndpoint), ("source_region", spec.sourceRegion), ("source_profile", spec.sourceProfile)]
            .filter { $0.1 != nil }.map(\.0)
        if let field = other.first, web {
            fail(job, id, field, "is for an s3:// source; an http(s) source is read as it is", fix: "remove it")
        }
    }

    mutating func resolveSource(_ source: String?, job: Int, id: String?, required: Bool) -> String? {
        guard let source, !source.isEmpty else {
            if required { fail(job, id, "source", "is missing", fix: "name the local file to upload") }
            return nil
        }
        return resolveInsideRoot(source, field: "source", job: job, id: id)
    }
}


/// A destination path as two 64-bit hashes of it: two different paths share both only by a
/// chance near 2^-128, far below a disk's error rate. (Hasher is seeded once per process,
/// the same for every line of a file.)
struct DestinationDigest: Hashable {
    let first: Int
    let second: Int

    init(_ path: String) {
        var one = Hasher()
        one.combine(0 as UInt8)
        one.combine(path)
        var two = Hasher()
        two.combine(1 as UInt8)
        two.combine(path)
        first = one.finalize()
        second = two.finalize()
    }
}

extension JobFileParser {
    /// A list line's words: what spaces and tabs separate. An ASCII line (nearly every one) is
    /// split by bytes, where a Character is a byte; any other as Characters, since a combining
    /// mark after a space makes one Character that is not a space. Splitting every line as
    /// Characters was 12% of the time to ingest 10,000 URLs (perf).
    static func words(_ line: Substring) -> [String] {
        let split = line.utf8.withContiguousStorageIfAvailable { bytes -> [String]? in
            guard !bytes.contains(where: { $0 >= 0x80 }) else { return nil }
            return bytes.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 }).map { String(decoding: $0, as: UTF8.self) }
        }
        return (split ?? nil) ?? line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
    }

    /// The lines of `text`, split where a split on `Character.isNewline` splits them (LF, CR,
    /// CR LF as one, VT, FF, NEL, LS, PS; none of them joins a grapheme with what is next to it),
    /// empty lines kept. By UTF-8 bytes: splitting by Character was 17% of the time to ingest a
    /// list of 10,000 URLs (perf).
    static func lines(_ text: String) -> [Substring] {
        let bytes = text.utf8
        var lines: [Substring] = []
        var start = bytes.startIndex
        var index = start
        func byte(after offset: Int) -> UInt8? {
            guard let next = bytes.index(index, offsetBy: offset, limitedBy: bytes.endIndex), next < bytes.endIndex else { return nil }
            return bytes[next]
        }
        while index < bytes.endIndex {
            var width = 0
            switch bytes[index] {
            case 0x0A, 0x0B, 0x0C: width = 1
            case 0x0D: width = byte(after: 1) == 0x0A ? 2 : 1
            case 0xC2: width = byte(after: 1) == 0x85 ? 2 : 0
            case 0xE2: width = byte(after: 1) == 0x80 && (byte(after: 2) == 0xA8 || byte(after: 2) == 0xA9) ? 3 : 0
            default: break
            }
            guard width > 0 else {
                index = bytes.index(after: index)
                continue
            }
            lines.append(Substring(bytes[start..<index]))
            index = bytes.index(index, offsetBy: width)
            start = index
        }
        lines.append(Substring(bytes[start..<bytes.endIndex]))
        return lines
    }
}

extension StringProtocol {
    /// Without leading and trailing white space (no Foundation bridging: list files have a line per job).
    func trimmingSpaces() -> SubSequence {
        guard let first = firstIndex(where: { !$0.isWhitespace }), let last = lastIndex(where: { !$0.isWhitespace }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }
}
