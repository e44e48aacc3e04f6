"""data_staging: a burst job's staging record, so a restarted daemon resumes the transfer (issue 24)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 22:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('data_staging',
    sa.Column('job_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('record', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_data_staging'))
    )


def downgrade() -> None:
    op.drop_table('data_staging')
