import Foundation

extension QueueRunner {
    /// Runs one job to an outcome. Never throws: every failure becomes an
    /// outcome the loop records.
    func execute(_ job: ActiveJob) async -> JobOutcome {
        let spec = job.record.spec
        guard spec.kind == .download else {
            return .failed("\(spec.kind.rawValue) jobs are not supported by this transferd yet: it runs downloads only")
        }
        let options: DownloadOptions
        do {
            options = try downloadOptions(for: job)
        } catch {
            return .failed(String(describing: error))
        }
        let transport = transports.transport(named: spec.transport ?? self.options.transport)
        let engine = DownloadEngine(transport: transport, options: options,
                                    store: JobCheckpointStore(store: store, jobID: spec.id, initial: job.record.checkpoint))
        job.engine.withLock { $0 = engine }
        do {
            return .done(try await engine.run())
        } catch let deferred as DownloadDeferred {
            if Task.isCancelled { return job.cancelledByUser.current ? .cancelled : .interrupted }
            return .retry(delay: deferred.delay, reason: deferred.reason, failures: deferred.failures)
        } catch {
            if error is CancellationError || Task.isCancelled {
                return job.cancelledByUser.current ? .cancelled : .interrupted
            }
            return .failed(String(describing: error))
        }
    }

    private func downloadOptions(for job: ActiveJob) throws -> DownloadOptions {
        let spec = job.record.spec
        var headers = HTTPHeaders()
        for (name, value) in spec.headers.sorted(by: { $0.key < $1.key }) {
            headers.add(name, try EnvironmentReference.expand(value, environment: environment))
        }
        guard let url = URL(string: spec.url), let destination = spec.destination else {
            throw QueueError.unknownJob(spec.id)
        }
        try ensureFolder((destination as NSString).deletingLastPathComponent)
        var download = DownloadOptions(
            url: url, destination: destination, headers: headers, connections: job.connections,
            sha256: spec.sha256, overwrite: spec.overwrite ?? .refuse,
            retry: RetryPolicy(maxAttempts: spec.retries ?? options.retries, baseDelay: options.retryBaseDelay),
            tls: options.tls, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
            maxRedirects: options.maxRedirects, maxRate: spec.limitRate)
        download.sharedLimiter = limiter
        download.retryInPlace = false
        download.syncEachFile = false
        download.deferRename = true
        download.ownTicker = false
        // A checkpoint (a row update, no fsync) after every 256 KiB write: a crash
        // re-fetches at most about 512 KiB per active segment.
        download.checkpointBytes = 256 << 10
        download.writeBufferSize = 256 << 10
        download.checkpointInterval = 0.25
        download.priorFailures = job.record.attempts
        return download
    }
}
