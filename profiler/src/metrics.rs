//! `record --metrics ADDR`: a tiny HTTP server that serves the latest Prometheus text
//! (rendered by export/prometheus.rs from a live snapshot of the kernel maps) on
//! `GET /metrics`. The record loop refreshes it; this thread only serves it.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context, Result};

pub struct MetricsServer {
    pub addr: SocketAddr,
    body: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    pub fn start(addr: SocketAddr, initial: String) -> Result<Self> {
        let listener = TcpListener::bind(addr).with_context(|| {
            format!(
                "cannot serve metrics on {addr}: choose a free port with --metrics 127.0.0.1:PORT"
            )
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        listener
            .set_nonblocking(true)
            .context("cannot make the metrics socket non-blocking")?;
        let body = Arc::new(Mutex::new(initial));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let body = body.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("lockpath-metrics".into())
                .spawn(move || serve(listener, body, stop))
                .context("cannot start the metrics thread")?
        };
        Ok(MetricsServer {
            addr,
            body,
            stop,
            thread: Some(thread),
        })
    }

    pub fn update(&self, text: String) {
        if let Ok(mut body) = self.body.lock() {
            *body = text;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: TcpListener, body: Arc<Mutex<String>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let text = body.lock().map(|body| body.clone()).unwrap_or_default();
                // A misbehaving client only loses its own answer.
                let _ = answer(stream, &text);
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) => {
                log::warn!("metrics: accept failed: {err}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Reads the request head and answers `GET /metrics`; 404 for other paths.
fn answer(mut stream: TcpStream, metrics: &str) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let request = String::from_utf8_lossy(&head);
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics,
        ),
        ("GET", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "lockpath: metrics at /metrics\n",
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics\n",
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").expect("send");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read");
        text
    }

    #[test]
    fn serves_the_latest_text() {
        let server = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), "a 1\n".into())
            .expect("start");
        assert!(get(server.addr, "/metrics").ends_with("\r\n\r\na 1\n"));
        server.update("a 2\n".into());
        let reply = get(server.addr, "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("version=0.0.4"));
        assert!(reply.ends_with("a 2\n"), "{reply}");
        assert!(get(server.addr, "/nope").starts_with("HTTP/1.1 404"));
    }
}
