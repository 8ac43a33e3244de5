import Foundation

/// Runs an `s3-copy` job: one object, or every object under a prefix, copied by the
/// server to the job's `url` on the same endpoint; or an http(s) URL, or an object on
/// another endpoint, streamed through memory (`StreamedCopy`). The multipart uploads'
/// ids and parts live in the job's row, so a later attempt, run or worker continues them.
struct S3CopyExecutor: JobExecutor {
    let context: ExecutionContext

    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome {
        let spec = job.record.spec
        let transport = context.transports.transport(named: spec.transport ?? context.options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? context.options.retries, baseDelay: context.options.retryBaseDelay)
        var single: S3ObjectCopy?
        var streamed: StreamedCopy?
        var prefixCopy: S3PrefixCopy?
        do {
            guard let source = spec.source, let target = S3CopyTarget(source: source, destination: spec.url) else {
                throw QueueError.unknownJob(spec.id)
            }
            let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region,
                                                            profile: spec.profile, environment: context.environment)
            let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: context.options.tls)
            let state = JobUploadStateStore(store: context.store, job: job)
            let progress = context.progressRecorder(job)
            switch target {
            case .prefix(let from, let bucket, let prefix):
                // Another endpoint or other credentials: each object streamed through memory.
                var sourceClient: S3Client?
                if spec.sourceEndpoint != nil || spec.sourceProfile != nil || spec.sourceRegion != nil {
                    let sourceConfiguration = try S3Configuration.resolve(
                        endpoint: spec.sourceEndpoint ?? spec.endpoint, region: spec.sourceRegion ?? spec.region,
                        profile: spec.sourceProfile ?? spec.profile, environment: context.environment)
                    sourceClient = S3Client(configuration: sourceConfiguration, transport: transport, retry: retry, tls: context.options.tls)
                }
                let copy = S3PrefixCopy(
                    client: client, from: sourceClient, source: from, bucket: bucket, prefix: prefix, partSize: spec.partSize ?? 64 << 20,
                    partsInFlight: spec.partsInFlight ?? 10, objectsInFlight: max(1, job.connections),
                    filter: S3PrefixPlan.Filter(include: spec.include ?? [], exclude: spec.exclude ?? []),
                    skipUnchanged: spec.skipUnchanged ?? false, sync: spec.syncOptions, store: state, onEvent: progress)
                prefixCopy = copy
                return .completed(size: try await copy.run().bytes)
            case .web(let url, let bucket, let key):
                var source = StreamSource(url: url, headers: try context.expandedHeaders(spec), tls: context.options.tls)
                source.connectTimeout = context.options.connectTimeout
                source.idleTimeout = context.options.idleTimeout
                var streamOptions = StreamedCopyOptions(source: source, bucket: bucket, key: key, partSize: spec.partSize ?? 8 << 20,
                                                        partsInFlight: spec.partsInFlight ?? 4)
                let pool = context.transports
                let backend = spec.transport ?? context.options.transport
                streamOptions.sequentialTransport = { pool.fresh(named: backend) }
                let copy = StreamedCopy(client: client, transport: transport, retry: retry, options: streamOptions,
                                        state: state, onEvent: progress)
                streamed = copy
                return .completed(size: try await copy.run().size)
            case .object(let from, let bucket, let key) where spec.sourceEndpoint != nil || spec.sourceProfile != nil
                || spec.sourceRegion != nil:
                // Another endpoint or other credentials: the bytes come through this machine, streamed.
                let sourceConfiguration = try S3Configuration.resolve(
                    endpoint: spec.sourceEndpoint ?? spec.endpoint, region: spec.sourceRegion ?? spec.region,
                    profile: spec.sourceProfile ?? spec.profile, environment: context.environment)
                let sourceClient = S3Client(configuration: sourceConfiguration, transport: transport, retry: retry,
                                            tls: context.options.tls)
                let copy = StreamedCopy(client: client, transport: transport, retry: retry,
                                        options: StreamedCopyOptions(source: try StreamSource(s3: sourceClient, bucket: from.bucket, key: from.key),
                                                                     bucket: bucket, key: key, partSize: spec.partSize ?? 8 << 20,
                                                                     partsInFlight: spec.partsInFlight ?? 4),
                                        state: state, onEvent: progress)
                streamed = copy
                return .completed(size: try await copy.run().size)
            case .object(let from, let bucket, let key):
                var options = S3CopyOptions(source: from, bucket: bucket, key: key, partSize: spec.partSize ?? 64 << 20,
                                            partsInFlight: spec.partsInFlight ?? 10)
                options.skipUnchanged = spec.skipUnchanged ?? false
                let copy = S3ObjectCopy(client: client, options: options, state: state, onEvent: progress)
                single = copy
                let result = try await copy.run()
                return .completed(size: result.size)
            }
        } catch {
            if error is CancellationError || Task.isCancelled {
                guard job.cancelledByUser.current else { return .interrupted }
                // A cancelled copy is aborted so no parts are left behind; from a task of its own, since a
                // transport refuses to start an exchange in a cancelled task.
                await Task.detached {
                    if let single { await single.abandon() }
                    if let streamed { await streamed.abandon() }
                    if let prefixCopy { await prefixCopy.abandonUnfinished() }
                }.value
                return .cancelled
            }
            // A prefix copy that fails leaves none of its objects' copies in parts stored.
            if let prefixCopy { await prefixCopy.abandonUnfinished() }
            return .failed(String(describing: error))
        }
    }
}

/// What an `s3-copy` names: one object to a key (a destination ending in `/` takes the
/// source's last name), or a prefix (a source ending in `/`, or a bucket) to a prefix.
package enum S3CopyTarget: Equatable, Sendable {
    case object(S3Location, bucket: String, key: String)
    case prefix(S3Location, bucket: String, prefix: String)
    /// An http(s) URL to an object (a destination ending in `/` takes the URL's file name).
    case web(URL, bucket: String, key: String)

    package init?(source: String, destination: String) {
        if source.hasPrefix("http://") || source.hasPrefix("https://") {
            guard let url = URL(string: source), url.host?.isEmpty == false else { return nil }
            if let to = S3Prefix(destination) {
                self = .web(url, bucket: to.bucket, key: to.prefix + URLFileName.of(url))
            } else if let to = S3Location(destination) {
                self = .web(url, bucket: to.bucket, key: to.key)
            } else {
                return nil
            }
        } else if let from = S3Prefix(source) {
            guard let to = S3Prefix(destination) ?? S3Location(destination).map({ S3Prefix(bucket: $0.bucket, prefix: $0.key + "/") })
            else { return nil }
            self = .prefix(S3Location(bucket: from.bucket, key: from.prefix), bucket: to.bucket, prefix: to.prefix)
        } else if let from = S3Location(source) {
            if let to = S3Prefix(destination) {
                let name = from.key.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? from.key
                self = .object(from, bucket: to.bucket, key: to.prefix + name)
            } else if let to = S3Location(destination) {
                self = .object(from, bucket: to.bucket, key: to.key)
            } else {
                return nil
            }
        } else {
            return nil
        }
    }

    /// Why this copy cannot be made (onto itself, or between overlapping prefixes), or nil.
    package var problem: String? {
        switch self {
        case .object(let from, let bucket, let key):
            return from.bucket == bucket && from.key == key ? "s3://\(bucket)/\(key) is the source itself" : nil
        case .prefix(let from, let bucket, let prefix):
            return S3PrefixCopy.overlapProblem(source: from, bucket: bucket, prefix: prefix)
        case .web:
            return nil
        }
    }
}
