"""job_progress: a training job's latest progress report, so a restarted daemon keeps it (issue 26)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 12:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('job_progress',
    sa.Column('job_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('record', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_progress'))
    )
    op.create_index(op.f('ix_job_progress_updated_at'), 'job_progress', ['updated_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_job_progress_updated_at'), table_name='job_progress')
    op.drop_table('job_progress')
