#!/bin/bash
# Deployment script for Project Orion API
set -e

SERVER="api.v2.orion.internal"
DEPLOY_USER="deploy"
APP_DIR="/opt/orion/api"
BACKUP_DIR="/opt/orion/backups"
SERVICE="orion-api"
TIMESTAMP=$(date +%Y%m%d_%H%M%S)

echo "Deploying Project Orion API to ${SERVER}..."

# 1. Back up the current release on the server
echo "Creating backup ${BACKUP_DIR}/api_${TIMESTAMP}..."
ssh "${DEPLOY_USER}@${SERVER}" "mkdir -p ${BACKUP_DIR} && cp -r ${APP_DIR} ${BACKUP_DIR}/api_${TIMESTAMP}"

# 2. Sync the code
echo "Syncing code..."
rsync -avz --delete \
    --exclude '*.pyc' \
    --exclude '__pycache__' \
    ./ "${DEPLOY_USER}@${SERVER}:${APP_DIR}/"

# 3. Restart the service
echo "Restarting ${SERVICE}..."
ssh "${DEPLOY_USER}@${SERVER}" "sudo systemctl restart ${SERVICE}"

# 4. Health check, rolling back on failure
echo "Running health check..."
sleep 5
if curl -fsS "http://${SERVER}:8080/health" > /dev/null; then
    echo "Deployment successful."
else
    echo "Health check failed, rolling back to api_${TIMESTAMP}..."
    ssh "${DEPLOY_USER}@${SERVER}" "rm -rf ${APP_DIR} && cp -r ${BACKUP_DIR}/api_${TIMESTAMP} ${APP_DIR} && sudo systemctl restart ${SERVICE}"
    exit 1
fi
