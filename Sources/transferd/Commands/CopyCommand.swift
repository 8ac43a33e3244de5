import Foundation
import TransferCore

/// `transferd copy SRC s3://DST`: a copy the S3 server makes, of one object or of every
/// object under a prefix, to another key or prefix on the same endpoint; or a copy
/// streamed through memory, from an http(s) URL or an object on another endpoint.
enum CopyCommand {
    static let partSize = Flag.byteSize("--part-size", value: "SIZE",
                                        help: "part size of a copy in parts that are not the source's own (default 64M; streamed: 8M)")
    static let parts = Flag.integer("--parts", value: "N", range: 1...64, help: "parts copied at once (default: 10; streamed: 4, memory is part size x parts)")
    static let jobs = Flag.integer("-j", "--jobs", value: "N", range: 1...256, help: "prefix copy: objects copied at once (default: 8)")
    static let skipUnchanged = Flag.presence("--skip-unchanged", help: "copy nothing the destination already holds (same size and ETag)")
    static let include = Flag.repeated("--include", value: "GLOB", help: "prefix copy: only keys (below the prefix) matching GLOB (repeatable)")
    static let exclude = Flag.repeated("--exclude", value: "GLOB", help: "prefix copy: skip keys matching GLOB (repeatable)")
    static let endpoint = Flag.string("--endpoint", value: "URL",
                                      help: "S3 endpoint of both sides (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)")
    static let region = Flag.string("--region", value: "REGION", help: "region (default: AWS_REGION, the profile, or us-east-1)")
    static let profile = Flag.string("--profile", value: "NAME", help: "credentials profile in ~/.aws/credentials (default: AWS_PROFILE or default)")
    static let sourceEndpoint = Flag.string("--source-endpoint", value: "URL",
                                            help: "the source object's endpoint when it is another: the copy is streamed")
    static let sourceRegion = Flag.string("--source-region", value: "REGION", help: "the source object's region (default: --region's)")
    static let sourceProfile = Flag.string("--source-profile", value: "NAME", help: "the source object's credentials profile (default: --profile's)")
    static let quiet = Flag.presence("-q", "--quiet", help: "print errors only")
    /// `--max-redirects` of the transfer flags, bounded lower for a streamed source.
    static let maxRedirects = Flag.integer(TransferFlags.maxRedirects.spec, range: 0...50)

    static let specs: [OptionSpec] = [
        partSize.spec, parts.spec, jobs.spec, skipUnchanged.spec, include.spec, exclude.spec, endpoint.spec, region.spec,
        profile.spec, sourceEndpoint.spec, sourceRegion.spec, sourceProfile.spec, quiet.spec, StandardFlags.help.spec,
    ] + SyncFlags.specs + TransferFlags.specs.filter { spec in
        ![TransferFlags.limitRate.name, TransferFlags.speedLimit.name, TransferFlags.speedTime.name].contains(spec.key)
    }

    static let usage = "transferd copy s3://BUCKET/KEY|https://HOST/PATH s3://BUCKET/KEY [options]"

    static let help = CommandHelp(name: "copy", usage: usage, summary: """
        Copies an S3 object, or every object under a prefix (a source ending with /), to another
        key or prefix on the same endpoint. The server copies the bytes: none pass through this
        machine. A destination ending with / takes the source object's name. Metadata and
        Content-Type go with the copy; a copy in parts resumes after an interruption when the
        same command is run again. From an http(s) URL, or an object on another endpoint
        (--source-endpoint, --source-profile), the copy is streamed: each part is a ranged GET
        of the source and an UploadPart, in memory, never on disk; it resumes too.
        """, options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let flags: CopyOptions
        let target: S3CopyTarget
        let client: S3Client
        do {
            let arguments = try ParsedArguments.parse(argv, specs: specs, command: "copy")
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            flags = CopyOptions(arguments)
            guard flags.positionals.count == 2 else { throw UsageError("need a source and a destination; usage: \(usage)") }
            let (source, destination) = (flags.positionals[0], flags.positionals[1])
            guard destination.hasPrefix("s3://") else {
                throw UsageError("'\(destination)' is not an s3:// URL: copy writes to S3 (get downloads to this machine)")
            }
            guard source.hasPrefix("s3://") || source.hasPrefix("http://") || source.hasPrefix("https://") else {
                throw UsageError("'\(source)' is not an s3:// or http(s):// URL (put uploads a local file)")
            }
            guard let made = S3CopyTarget(source: source, destination: destination) else {
                throw UsageError("'\(source)' or '\(destination)' names no bucket: write s3://bucket/key or s3://bucket/prefix/")
            }
            var isPrefix = false
            if case .prefix = made { isPrefix = true }
            // Overlapping prefixes matter on one endpoint only.
            let across = flags.sourceEndpoint != nil || flags.sourceRegion != nil || flags.sourceProfile != nil
            if let problem = made.problem, !(across && isPrefix) { throw UsageError(problem) }
            if !isPrefix {
                for spec in [include.spec, exclude.spec, jobs.spec] where flags.given(spec) {
                    throw UsageError("\(spec.key) is for a prefix copy; \(source) names one object (end it with / for a prefix)")
                }
                try SyncFlags.refuseForOne(flags.sync, what: source)
            }
            _ = try SyncFlags.options(flags.sync)
            if case .web = made {
                for spec in [sourceEndpoint.spec, sourceRegion.spec, sourceProfile.spec, skipUnchanged.spec] where flags.given(spec) {
                    throw UsageError("\(spec.key) is for an s3:// source")
                }
            }
            target = made
            let configuration = try S3Configuration.resolve(endpoint: flags.endpoint,
                                                            region: flags.region,
                                                            profile: flags.profile)
            client = S3Client(configuration: configuration, transport: try TransferFlags.transport(flags.transfer),
                              retry: try TransferFlags.retry(flags.transfer), tls: try TransferFlags.tls(flags.transfer))
        } catch {
            Output.err("transferd copy: \(error)\n")
            return .usage
        }
        let quiet = flags.quiet
        let source = flags.positionals[0]
        do {
            let streamedAcross = flags.sourceEndpoint != nil || flags.sourceRegion != nil || flags.sourceProfile != nil
            var streamedTo: (source: StreamSource, bucket: String, key: String)?
            switch target {
            case .web(let url, let bucket, let key):
                var from = StreamSource(url: url, headers: try TransferFlags.headers(flags.transfer), tls: try TransferFlags.tls(flags.transfer))
                from.connectTimeout = try flags.transfer.connectTimeout ?? 15
                from.idleTimeout = try flags.transfer.idleTimeout ?? 30
                from.maxRedirects = try flags.maxRedirects ?? 10
                streamedTo = (from, bucket, key)
            case .object(let from, let bucket, let key) where streamedAcross:
                let configuration = try S3Configuration.resolve(
                    endpoint: flags.sourceEndpoint ?? flags.endpoint,
                    region: flags.sourceRegion ?? flags.region,
                    profile: flags.sourceProfile ?? flags.profile)
                let sourceClient = S3Client(configuration: configuration, transport: client.transport, retry: client.retry, tls: client.tls)
                streamedTo = (try StreamSource(s3: sourceClient, bucket: from.bucket, key: from.key), bucket, key)
            default:
                break
            }
            let partSize = try flags.partSize ?? (streamedTo == nil ? 64 << 20 : 8 << 20)
            guard partSize >= 5 << 20 else { throw UsageError("--part-size must be at least 5M (S3's smallest part)") }
            let parts = try flags.parts ?? (streamedTo == nil ? 10 : 4)
            // The record of a copy names its destination's endpoint too: the same names on two servers are two copies.
            let recordName = client.configuration.endpoint.absoluteString + " " + source
            let started = Date()
            let line = UploadLine(name: streamedTo.map { Redaction.url($0.source.url) } ?? source, quiet: quiet, verb: "copying")
            if let (from, bucket, key) = streamedTo {
                var streamOptions = StreamedCopyOptions(source: from, bucket: bucket, key: key, partSize: partSize, partsInFlight: parts)
                // A source without ranges is read once through a transport of its own (its thread may wait).
                let sequential = try TransferFlags.transport(flags.transfer)
                streamOptions.sequentialTransport = { sequential }
                let copy = StreamedCopy(client: client, transport: client.transport, retry: client.retry,
                                        options: streamOptions,
                                        state: FileUploadStateStore(source: recordName, bucket: bucket, key: key)) { line.handle($0) }
                let result = try await SignalHandler.cancelling { try await copy.run() }
                line.clear()
                if !quiet {
                    let resumed = result.resumed ? ", resumed: \(result.partsSent) of \(result.parts) parts sent now" : ""
                    Output.err("\(Redaction.url(from.url)): s3://\(bucket)/\(key) \(Format.bytes(result.size)) streamed in \(result.parts) "
                               + "part\(result.parts == 1 ? "" : "s") (\(String(format: "%.2f", result.elapsed)) s\(resumed)), ETag \(result.etag) verified\n")
                }
                return .success
            }
            switch target {
            case .web:
                return .success
            case .object(let from, let bucket, let key):
                var options = S3CopyOptions(source: from, bucket: bucket, key: key, partSize: partSize, partsInFlight: parts)
                options.skipUnchanged = flags.skipUnchanged
                let copy = S3ObjectCopy(client: client, options: options,
                                        state: FileUploadStateStore(source: recordName, bucket: bucket, key: key)) { line.handle($0) }
                let result = try await SignalHandler.cancelling { try await copy.run() }
                line.clear()
                guard !quiet else { return .success }
                let shown = "s3://\(bucket)/\(key)"
                if result.unchanged {
                    Output.err("\(source): \(shown) already holds it (\(Format.bytes(result.size)), ETag \(result.etag)); nothing copied\n")
                } else {
                    let resumed = result.resumed ? ", resumed: \(result.partsCopied) of \(result.parts) parts copied now" : ""
                    let how = result.parts == 1 ? "with CopyObject" : "in \(result.parts) parts"
                    Output.err("\(source): \(shown) \(Format.bytes(result.size)) copied \(how) (\(String(format: "%.2f", result.elapsed)) s\(resumed)); "
                               + "\(describe(result.verdict, etag: result.etag))\n")
                }
            case .prefix(let from, let bucket, let prefix):
                // Another endpoint or other credentials: each object streamed through memory.
                let sourceClient = streamedAcross ? S3Client(
                    configuration: try S3Configuration.resolve(
                        endpoint: flags.sourceEndpoint ?? flags.endpoint,
                        region: flags.sourceRegion ?? flags.region,
                        profile: flags.sourceProfile ?? flags.profile),
                    transport: client.transport, retry: client.retry, tls: client.tls) : nil
                let copy = S3PrefixCopy(
                    client: client, from: sourceClient, source: from, bucket: bucket, prefix: prefix, partSize: partSize, partsInFlight: parts,
                    objectsInFlight: try flags.jobs ?? 8,
                    filter: S3PrefixPlan.Filter(include: flags.include, exclude: flags.exclude),
                    skipUnchanged: flags.skipUnchanged, sync: try SyncFlags.options(flags.sync),
                    // One record per source and destination, whatever the filters: objects they no longer
                    // take have their unfinished copies aborted at the end, never left stored.
                    store: FileUploadStateStore(source: recordName, bucket: bucket, key: prefix)) { line.handle($0) }
                let result = try await SignalHandler.cancelling { try await copy.run() }
                line.clear()
                if let preview = result.preview {
                    SyncFlags.print(preview)
                    return .success
                }
                guard !quiet else { return .success }
                let copied = result.objects - result.unchanged - result.skippedAsDone
                var text = "\(source): \(copied) object\(copied == 1 ? "" : "s") copied to s3://\(bucket)/\(prefix), "
                    + "\(Format.bytes(result.bytes)) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s"
                if result.unchanged > 0 { text += ", \(result.unchanged) unchanged" }
                if result.skippedAsDone > 0 { text += ", \(result.skippedAsDone) done in an earlier run" }
                if result.deleted > 0 { text += ", \(result.deleted) deleted" }
                if result.checkedBySizeOnly > 0 {
                    text += "; \(result.checkedBySizeOnly) checked by size only (the server's ETags say nothing more)"
                }
                Output.err(text + "\n")
            }
            return .success
        } catch is CancellationError {
            Output.err("transferd copy: interrupted; what was copied in parts is recorded — run the same command to continue\n")
            return .interrupted
        } catch let error as UsageError {
            Output.err("transferd copy: \(error)\n")
            return .usage
        } catch let refusal as SyncRefusal {
            Output.err("transferd copy: \(refusal); nothing was copied or deleted\n")
            return .usage
        } catch {
            Output.err("transferd copy: \(Redaction.message(String(describing: error)))\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// What a finished copy was checked against, for its line.
    static func describe(_ verdict: S3CopyPlan.Verdict, etag: String) -> String {
        switch verdict {
        case .sameETag: return "ETag \(etag) verified, the source's own"
        case .sizeOnly(let why), .partsInDoubt(let why): return "size verified; \(why)"
        case .differs(let why): return "differs: \(why)"
        }
    }
}

/// `copy`'s options, typed: each read through its `Flag` in `CopyCommand`, a checked one where
/// the command uses it.
struct CopyOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var partSize: Int64? { get throws { try arguments.read(CopyCommand.partSize) } }
    var parts: Int? { get throws { try arguments.read(CopyCommand.parts) } }
    var jobs: Int? { get throws { try arguments.read(CopyCommand.jobs) } }
    var skipUnchanged: Bool { arguments[CopyCommand.skipUnchanged] }
    var include: [String] { arguments[CopyCommand.include] }
    var exclude: [String] { arguments[CopyCommand.exclude] }
    var endpoint: String? { arguments[CopyCommand.endpoint] }
    var region: String? { arguments[CopyCommand.region] }
    var profile: String? { arguments[CopyCommand.profile] }
    var sourceEndpoint: String? { arguments[CopyCommand.sourceEndpoint] }
    var sourceRegion: String? { arguments[CopyCommand.sourceRegion] }
    var sourceProfile: String? { arguments[CopyCommand.sourceProfile] }
    var quiet: Bool { arguments[CopyCommand.quiet] }
    /// Redirects a streamed http(s) source may take (0 to 50).
    var maxRedirects: Int? { get throws { try arguments.read(CopyCommand.maxRedirects) } }
    var transfer: TransferOptions { TransferOptions(arguments) }
    var sync: SyncFlagOptions { SyncFlagOptions(arguments) }
}
