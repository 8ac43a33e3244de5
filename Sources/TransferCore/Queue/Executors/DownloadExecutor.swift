import Foundation

/// Runs a `download` job: one file over HTTP(S), FTP or S3, ranges in parallel, its
/// checkpoint in the job's row; the complete file is left at its partial path for
/// the run's next durable batch to rename.
struct DownloadExecutor: JobExecutor {
    let context: ExecutionContext

    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome {
        do {
            let options = try downloadOptions(for: job)
            let transport = context.transports.transport(named: job.record.spec.transport ?? context.options.transport)
            let engine = DownloadEngine(transport: transport, options: options,
                                        store: JobCheckpointStore(store: context.store, job: job))
            job.engine.withLock { $0 = engine }
            return .done(try await engine.run())
        } catch let deferred as DownloadDeferred {
            if Task.isCancelled { return job.cancelledByUser.current ? .cancelled : .interrupted }
            return .waiting(deferred)
        } catch {
            if error is CancellationError || Task.isCancelled {
                return job.cancelledByUser.current ? .cancelled : .interrupted
            }
            if let deferred = Self.deferral(of: error, failures: job.record.attempts) { return .waiting(deferred) }
            return .failed(String(describing: error))
        }
    }

    /// What a job makes of a failure that passes: waits 5 s without counting a failure when
    /// another process writes its partial file (that writer ends); when the process is out of
    /// file descriptors anywhere in the download (its folder, its partial file, the checksum
    /// pass), tries again in 1 s (finished files close as their batch is renamed), counted as a
    /// failure so that a process that never frees one ends its jobs; nil: it fails now.
    static func deferral(of failure: Error, failures: Int) -> DownloadDeferred? {
        switch failure {
        case DownloadError.partInUse:
            return DownloadDeferred(delay: 5, reason: String(describing: failure), failures: failures)
        case DownloadError.local(let local) where local.isOutOfDescriptors:
            return outOfDescriptors(local, failures: failures)
        case let local as POSIXFailure where local.isOutOfDescriptors:
            return outOfDescriptors(local, failures: failures)
        default:
            return nil
        }
    }

    private static func outOfDescriptors(_ failure: POSIXFailure, failures: Int) -> DownloadDeferred {
        DownloadDeferred(delay: 1, reason: "\(failure); the process has as many files open as it may (raise `ulimit -n`)",
                         failures: failures + 1)
    }

    private func downloadOptions(for job: QueueRunner.ActiveJob) throws -> DownloadOptions {
        let spec = job.record.spec
        let headers = try context.expandedHeaders(spec)
        guard var url = URL(string: spec.url), let destination = spec.destination else {
            throw QueueError.unknownJob(spec.id)
        }
        var source: S3DownloadSource?
        if let location = S3Location(spec.url) {
            let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region, profile: spec.profile,
                                                            environment: context.environment)
            let client = S3Client(configuration: configuration,
                                  transport: context.transports.transport(named: spec.transport ?? context.options.transport))
            let object = try client.downloadSource(bucket: location.bucket, key: location.key)
            (source, url) = (object, object.url)
        }
        try context.ensureFolder(of: destination)
        var download = DownloadOptions(
            url: url, destination: destination, headers: headers, connections: job.connections,
            sha256: spec.sha256, overwrite: spec.overwrite ?? .refuse,
            retry: RetryPolicy(maxAttempts: spec.retries ?? context.options.retries, baseDelay: context.options.retryBaseDelay),
            tls: context.options.tls, connectTimeout: context.options.connectTimeout, idleTimeout: context.options.idleTimeout,
            maxRedirects: context.options.maxRedirects, maxRate: spec.limitRate)
        download.sharedLimiter = context.bandwidth.down
        download.rateAdjustable = true
        download.checksumsURL = spec.checksums.flatMap(URL.init(string:))
        download.checksumsName = spec.checksumsName
        download.mirrors = (spec.mirrors ?? []).compactMap(URL.init(string:))
        if let perMirror = spec.connectionsPerMirror { download.connectionsPerMirror = perMirror }
        if let size = spec.size { download.expectedSize = size }
        download.pieces = spec.pieces.flatMap(PieceHashes.init(encoded:))
        download.lowSpeed = context.lowSpeed(spec)
        source?.configure(&download)
        download.retryInPlace = false
        download.syncEachFile = false
        download.deferRename = true
        download.ownTicker = false
        // A checkpoint (a row update, no fsync) after every 256 KiB written: a killed
        // process re-fetches at most about 512 KiB per active segment; one that
        // syncs the file every 64 MiB bounds what a crash of the machine costs.
        download.checkpointBytes = 256 << 10
        download.syncBytes = 64 << 20
        download.checkpointInterval = 0.25
        download.priorFailures = job.record.attempts
        // In a shared store, a job with a checkpoint may have been taken from a worker frozen past
        // its lease, still holding the partial file: the store fences that worker off, so this
        // one writes. A partial file held by anything else (a `get`, and always with a local
        // store, where no job changes hands) waits.
        download.takesOverBusyPart = context.store.leaseSeconds != nil && job.record.checkpoint != nil
        return download
    }
}
