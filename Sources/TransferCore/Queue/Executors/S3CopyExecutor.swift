import Foundation

/// Runs an `s3-copy` job: one object, or every object under a prefix, copied by the
/// server to the job's `url` on the same endpoint. The multipart copies' ids and
/// copied parts live in the job's row, so a later attempt, run or worker continues them.
struct S3CopyExecutor: JobExecutor {
    let context: ExecutionContext

    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome {
        let spec = job.record.spec
        let transport = context.transports.transport(named: spec.transport ?? context.options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? context.options.retries, baseDelay: context.options.retryBaseDelay)
        var single: S3ObjectCopy?
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
                let result = try await S3PrefixCopy(
                    client: client, source: from, bucket: bucket, prefix: prefix, partSize: spec.partSize ?? 64 << 20,
                    partsInFlight: spec.partsInFlight ?? 10, objectsInFlight: max(1, job.connections),
                    filter: S3PrefixPlan.Filter(include: spec.include ?? [], exclude: spec.exclude ?? []),
                    skipUnchanged: spec.skipUnchanged ?? false, store: state, onEvent: progress).run()
                return .completed(size: result.bytes)
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
                // A cancelled copy is aborted so no parts are left behind.
                if let single { await single.abandon() }
                return .cancelled
            }
            return .failed(String(describing: error))
        }
    }
}

/// What an `s3-copy` names: one object to a key (a destination ending in `/` takes the
/// source's last name), or a prefix (a source ending in `/`, or a bucket) to a prefix.
package enum S3CopyTarget: Equatable, Sendable {
    case object(S3Location, bucket: String, key: String)
    case prefix(S3Location, bucket: String, prefix: String)

    package init?(source: String, destination: String) {
        if let from = S3Prefix(source) {
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
        }
    }
}
