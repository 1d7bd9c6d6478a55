from flask import Flask, jsonify

app = Flask(__name__)


@app.route("/health", methods=["GET"])
def health_check():
    return jsonify({"status": "healthy"})


@app.route("/api/v1/users", methods=["GET"])
def list_users():
    return jsonify({"users": [], "total": 0})


@app.route("/api/v1/project/<project_id>", methods=["GET"])
def get_project(project_id):
    """Return a single project by its ID.

    BUG: the path is inconsistent with the other collection routes. It
    uses the singular /project/:id, but should be the plural /projects/:id.
    """
    return jsonify({"id": project_id, "name": "Project Orion", "status": "active"})


@app.route("/api/v1/metrics", methods=["GET"])
def get_metrics():
    return jsonify({
        "cpu_percent": 45.2,
        "memory_percent": 62.8,
        "memory_used_mb": 1024,
        "uptime_seconds": 86400,
    })


if __name__ == "__main__":
    app.run(host="0.0.0.0", port=8080)
